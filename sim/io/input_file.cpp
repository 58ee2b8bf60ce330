#include "io/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "kernel/support/errors.hpp"

namespace rcsim {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

InputFile::InputFile(const std::string& path, std::string what, long long max_bytes, const std::string& cap_text)
    : what_(std::move(what)) {
  // A path from Python may hold a NUL byte; open() would read the name up to it, another file.
  if (path.find('\0') != std::string::npos)
    throw UsageError(what_ + ": the path holds a NUL byte; give a path without one");
  // O_NONBLOCK: opening a FIFO without a writer returns at once (it is refused below); a regular
  // file's reads ignore the flag.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) {
    const int err = errno;
    throw UsageError(what_ + ": cannot be opened (" + std::strerror(err) + ")");
  }
  struct stat st {};
  const bool known = fstat(fd_, &st) == 0;
  if (!known || !S_ISREG(st.st_mode)) {
    const std::string kind = known ? kind_of(st.st_mode) : "not a regular file";
    ::close(fd_);
    fd_ = -1;
    throw UsageError(what_ + ": is " + kind + "; expected a regular file");
  }
  size_ = static_cast<long long>(st.st_size);
  if (size_ > max_bytes) {
    ::close(fd_);
    fd_ = -1;
    throw UsageError(what_ + ": " + std::to_string(size_) + " bytes, larger than " + cap_text);
  }
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<char> InputFile::read(long long offset, std::size_t count) const {
  std::vector<char> out(count);
  std::size_t done = 0;
  while (done < count) {
    const ssize_t n = ::pread(fd_, out.data() + done, count - done, static_cast<off_t>(offset + static_cast<long long>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      throw UsageError(what_ + ": read failed (" + std::strerror(err) + ")");
    }
    if (n == 0)
      throw UsageError(what_ + ": ended after " + std::to_string(offset + static_cast<long long>(done)) +
                       " bytes while being read (it was " + std::to_string(size_) + " bytes; changed meanwhile?)");
    done += static_cast<std::size_t>(n);
  }
  return out;
}

std::string read_text_input(const std::string& path, const std::string& what, long long max_bytes,
                            const std::string& cap_text) {
  const InputFile f(path, what, max_bytes, cap_text);
  const std::vector<char> bytes = f.read_all();
  return std::string(bytes.begin(), bytes.end());
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ea, eb;
  const auto pa = std::filesystem::weakly_canonical(std::filesystem::absolute(a, ea), ea);
  const auto pb = std::filesystem::weakly_canonical(std::filesystem::absolute(b, eb), eb);
  return !ea && !eb && pa == pb;
}

}  // namespace rcsim
