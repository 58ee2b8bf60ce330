#include "io/safe_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "kernel/errors.hpp"

namespace fs = std::filesystem;

namespace rcsim {

namespace {

std::string os_error(int err) { return std::strerror(err); }

}  // namespace

std::string create_temporary(const std::string& target) {
  const fs::path t(target);
  const fs::path dir = t.parent_path();
  std::string name = (dir.empty() ? std::string() : dir.string() + "/") + "." + t.filename().string() + ".XXXXXX.tmp";
  std::vector<char> buf(name.begin(), name.end());
  buf.push_back('\0');
  const int fd = mkstemps(buf.data(), 4);
  if (fd < 0) {
    const int err = errno;
    throw RuntimeError("cannot create a temporary file beside '" + target + "': " + os_error(err));
  }
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, static_cast<mode_t>(0666) & ~mask);
  if (close(fd) != 0) {
    const int err = errno;
    unlink(buf.data());
    throw RuntimeError("cannot create a temporary file beside '" + target + "': " + os_error(err));
  }
  return std::string(buf.data());
}

void remove_stale_temporaries(const std::string& target) {
  const fs::path t(target);
  const fs::path dir = t.parent_path().empty() ? fs::path(".") : t.parent_path();
  const std::string prefix = "." + t.filename().string() + ".", suffix = ".tmp";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() == prefix.size() + 6 + suffix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      unlink(it->path().c_str());
  }
}

void replace_with(const std::string& tmp, const std::string& target) {
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    throw RuntimeError("cannot rename '" + tmp + "' to '" + target + "': " + os_error(err));
  }
}

void remove_quietly(const std::string& path) { unlink(path.c_str()); }

void write_whole_file(const std::string& path, const void* data, std::size_t size) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0) {
    const int err = errno;
    throw RuntimeError("cannot write '" + path + "': " + os_error(err));
  }
  const char* p = static_cast<const char*>(data);
  int err = 0;
  for (std::size_t done = 0; done < size;) {
    const ssize_t w = write(fd, p + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      err = errno;
      break;
    }
    done += static_cast<std::size_t>(w);
  }
  if (close(fd) != 0 && err == 0) err = errno;
  if (err != 0) throw RuntimeError("cannot write '" + path + "': " + os_error(err));
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

void require_regular_or_absent(const std::string& path, const std::string& key) {
  const std::string name = fs::path(path).filename().string();
  if (name.empty() || name == "." || name == "..")
    throw UsageError((key.empty() ? std::string() : "key '" + key + "': ") + "'" + path +
                     "' names a directory; expected a file name (e.g. data/run.h5)");
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return;
  if (S_ISREG(st.st_mode)) return;
  const char* what = S_ISDIR(st.st_mode)   ? "a directory"
                     : S_ISLNK(st.st_mode) ? "a symbolic link"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                     : S_ISFIFO(st.st_mode)                        ? "a FIFO"
                                                                   : "not a regular file";
  throw UsageError((key.empty() ? std::string() : "key '" + key + "': ") + "'" + path + "' exists and is " + what +
                   "; rcsim replaces only regular files (choose another name)");
}

std::string lock_path_for(const std::string& output) { return output + ".lock"; }

ExclusiveLock::ExclusiveLock(std::string lock_path, const std::string& what) : path_(std::move(lock_path)) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
      const int err = errno;
      throw RuntimeError("cannot create the lock file '" + path_ + "' for " + what + ": " + os_error(err));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      char buf[32] = {};
      const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
      close(fd);
      if (err == EWOULDBLOCK) {
        const std::string pid = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("?");
        throw RuntimeError(what + " is in use by process " + pid.substr(0, pid.find('\n')) + " (lock file '" + path_ +
                           "'); wait for it to finish, or choose another output");
      }
      throw RuntimeError("cannot lock '" + path_ + "': " + os_error(err));
    }
    // The holder before us may have removed the file after we opened it: lock the file that is there now.
    struct stat held {}, now {};
    if (fstat(fd, &held) == 0 && stat(path_.c_str(), &now) == 0 && held.st_ino == now.st_ino && held.st_dev == now.st_dev) {
      const std::string pid = std::to_string(getpid()) + "\n";
      if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
        const int err = errno;
        unlink(path_.c_str());
        close(fd);
        throw RuntimeError("cannot write the lock file '" + path_ + "': " + os_error(err));
      }
      fd_ = fd;
      return;
    }
    close(fd);
  }
  throw RuntimeError("cannot lock '" + path_ + "': it keeps being replaced");
}

ExclusiveLock::~ExclusiveLock() {
  if (fd_ >= 0) {
    unlink(path_.c_str());  // while still holding the lock
    close(fd_);
  }
}

}  // namespace rcsim
