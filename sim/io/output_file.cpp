#include "io/output_file.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <system_error>

#include "io/input_file.hpp"
#include "io/isolated.hpp"
#include "io/provenance.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"

namespace fs = std::filesystem;

namespace rcsim {

void write_header(const h5::Object& f, const FileHeader& h) {
  f.set_attr("filetype", h.filetype);
  f.set_attr("format_version", h.format_version);
  write_provenance(f, h.time_attr);
  if (h.command_line) f.set_attr("command_line", *h.command_line);
  if (h.complete_flag) f.set_attr("complete", 0);
}

void mark_complete(const h5::File& f) {
  f.label_unlabelled_axes();
  f.set_attr("complete", 1);  // last
}

namespace {

// A file the user named (by a key) gets its directory; rcsim's own files (checkpoints, indexes,
// tables) go into directories their caller made.
void create_parent_directory(const std::string& target, const std::string& key) {
  const fs::path parent = fs::path(target).parent_path();
  std::error_code ec;
  if (key.empty() || parent.empty() || fs::exists(parent, ec)) return;
  fs::create_directories(parent, ec);
  if (ec) throw UsageError("key '" + key + "': cannot create directory '" + parent.string() + "': " + ec.message());
}

}  // namespace

OutputFile::OutputFile(std::string target, OutputOptions o) : target_(std::move(target)), key_(std::move(o.key)) {
  create_parent_directory(target_, key_);
  require_regular_or_absent(target_, key_);
  // The target as it was checked, before the lock: create_temporary records the target again
  // (what the final rename may replace), so a file that appears between the two is caught here.
  struct stat checked {};
  const bool existed = lstat(target_.c_str(), &checked) == 0;
  if (!o.lock_what.empty()) {
    lock_.emplace(lock_path_for(target_), o.lock_what);
    remove_stale_temporaries(target_);  // of a killed writer (ours to remove: we hold the lock)
    for (const std::string& other : o.also_clean) remove_stale_temporaries(other);
  }
  tmp_ = create_temporary(target_);
  struct stat now {};
  const bool exists = lstat(target_.c_str(), &now) == 0;
  if (exists != existed || (exists && (now.st_dev != checked.st_dev || now.st_ino != checked.st_ino))) {
    remove_quietly(tmp_);
    throw RuntimeError("'" + target_ + "' appeared or was replaced while rcsim was writing it (not by this run); "
                       "refusing to replace it (move that file away and rerun)");
  }
}

OutputFile::~OutputFile() {
  if (!published_) remove_quietly(tmp_);
}

void OutputFile::publish() {
  require_regular_or_absent(target_, key_);
  replace_with(tmp_, target_);
  published_ = true;
}

void OutputFile::write_hdf5(const FileHeader& h, const std::function<void(const h5::File&)>& body) {
  {
    h5::File f = h5::File::create(tmp_);
    write_header(f, h);
    body(f);
    if (h.complete_flag) mark_complete(f);
    else f.label_unlabelled_axes();
    f.close();  // checked before the rename
  }
  publish();
}

void OutputFile::update_hdf5(const std::string& group, const std::function<void(const h5::Group&)>& body,
                             const std::string& what) {
  run_isolated([&] {
    h5::File f = h5::File::open_readwrite(target_, tmp_);
    if (f.exists(group)) f.remove(group);
    {
      const h5::Group g = f.create_group(group);
      body(g);
      g.label_unlabelled_axes();
    }
    f.close();  // checked before the rename
  }, what, isolated_time_limit(target_));
  publish();
}

void OutputFile::write_bytes(const std::string& bytes) {
  write_whole_file(tmp_, bytes.data(), bytes.size());
  publish();
}

void refuse_existing_output(const OutputFile& out, const std::string& key, const std::vector<OutputInput>& inputs,
                            bool force, const std::string& filetype) {
  const std::string name = key + " '" + printable(out.target()) + "'";
  for (const OutputInput& in : inputs)
    if (!in.path.empty() && same_file(out.target(), in.path))
      throw UsageError(name + " is the file this command reads as " + in.role +
                       "; rcsim never writes over its own input, not even with --force (choose another name)");
  if (force || !path_exists(out.target())) return;
  if (filetype.empty())
    throw UsageError(name + " exists; refusing to overwrite it (remove it, choose another name, or rerun with --force)");
  h5::check_replaceable(out.target(), key, filetype, force);  // a file that is not a complete one of `filetype`
  throw UsageError(name + " is a complete " + filetype + " file (a finished run); refusing to replace it (remove it, "
                   "choose another name, or rerun with --force)");
}

}  // namespace rcsim
