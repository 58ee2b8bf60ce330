#include "io/provenance.hpp"

#include <chrono>
#include <ctime>

#include "kernel/support/version.hpp"

namespace rcsim {

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

void write_provenance(const h5::Object& o, const char* time_attr) {
  o.set_attr("rcsim_version", version());
  o.set_attr("git_sha", git_sha());
  o.set_attr(time_attr, utc_now());
  o.set_attr("source_tree", source_tree());
  o.set_attr("compiler", compiler());
  o.set_attr("build_type", build_type());
  o.set_attr("instruction_set", instruction_set());
  o.set_attr("hdf5_version", hdf5_version());
}

}  // namespace rcsim
