#include "io/safe_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <vector>

#include "kernel/support/errors.hpp"

namespace fs = std::filesystem;

namespace rcsim {

namespace {

std::string os_error(int err) { return std::strerror(err); }

// What this process knows about the temporaries it created (issue 22): the state of the target
// when the temporary was made, so that the final rename never replaces a file that appeared (or
// was swapped in) during the run, and so that stale-temporary clean-up knows its own.
struct TargetAtStart {
  bool existed = false;
  dev_t dev = 0;
  ino_t ino = 0;
};
std::mutex g_temporaries_mutex;
std::map<std::string, TargetAtStart>& temporaries() {
  static std::map<std::string, TargetAtStart> m;
  return m;
}
bool (*g_rcsim_file_test)(const std::string&) = nullptr;

// rename(tmp, target) that fails with EEXIST if target exists: renameat2(RENAME_NOREPLACE),
// or link() + unlink() where the filesystem refuses renameat2. Returns 0 or an errno value.
int rename_no_replace(const std::string& tmp, const std::string& target) {
#if defined(SYS_renameat2)
  constexpr unsigned kNoReplace = 1;  // RENAME_NOREPLACE
  if (syscall(SYS_renameat2, AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), kNoReplace) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS && errno != EPERM && errno != ENOTSUP) return errno;
#endif
  if (link(tmp.c_str(), target.c_str()) == 0) {
    unlink(tmp.c_str());
    return 0;
  }
  if (errno != EPERM && errno != ENOTSUP && errno != ENOSYS) return errno;
  // A filesystem with neither (no hard links, e.g. FAT): the check and the rename are two steps.
  struct stat st {};
  if (lstat(target.c_str(), &st) == 0) return EEXIST;
  return std::rename(tmp.c_str(), target.c_str()) == 0 ? 0 : errno;
}

}  // namespace

namespace {
constexpr const char* kTemporaryMark = "user.rcsim";  // extended attribute of rcsim's temporaries
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
  // The mark that makes a killed writer's temporary provably rcsim's (is_stale_rcsim_temporary):
  // run files and checkpoints are written on disk by HDF5, so a kill leaves a temporary that is
  // neither empty nor a readable rcsim file. Where the file system has no user attributes, such a
  // temporary is left alone (as any file that is not provably rcsim's).
  (void)fsetxattr(fd, kTemporaryMark, "temporary", 9, 0);
  if (close(fd) != 0) {
    const int err = errno;
    unlink(buf.data());
    throw RuntimeError("cannot create a temporary file beside '" + target + "': " + os_error(err));
  }
  TargetAtStart at;
  struct stat st {};
  if (lstat(target.c_str(), &st) == 0) at = {true, st.st_dev, st.st_ino};
  {
    const std::lock_guard<std::mutex> hold(g_temporaries_mutex);
    temporaries()[std::string(buf.data())] = at;
  }
  return std::string(buf.data());
}

void set_rcsim_file_test(bool (*test)(const std::string&)) { g_rcsim_file_test = test; }

void remove_stale_temporaries(const std::string& target) {
  const fs::path t(target);
  const fs::path dir = t.parent_path().empty() ? fs::path(".") : t.parent_path();
  const std::string prefix = "." + t.filename().string() + ".", suffix = ".tmp";
  // "Stale" means older than the target's lock (written when this process took it), or than
  // this call where there is no lock file.
  struct stat lock_st {};
  struct timespec lock_time {};
  if (stat(lock_path_for(target).c_str(), &lock_st) == 0)
    lock_time = lock_st.st_mtim;
  else
    clock_gettime(CLOCK_REALTIME, &lock_time);
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!(name.size() == prefix.size() + 6 + suffix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0))
      continue;
    const std::string path = it->path().string();
    bool ours = false;
    {
      const std::lock_guard<std::mutex> hold(g_temporaries_mutex);
      ours = temporaries().count(path) > 0;
    }
    if (!ours && !is_stale_rcsim_temporary(path, lock_time)) continue;  // not provably rcsim's: left alone
    unlink(path.c_str());
    const std::lock_guard<std::mutex> hold(g_temporaries_mutex);
    temporaries().erase(path);
  }
}

bool is_stale_rcsim_temporary(const std::string& path, const struct timespec& before) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != geteuid())
    return false;
  if (!(st.st_mtim.tv_sec < before.tv_sec || (st.st_mtim.tv_sec == before.tv_sec && st.st_mtim.tv_nsec < before.tv_nsec)))
    return false;
  // Empty: made by create_temporary (mkstemp) and never written (the process died computing).
  if (st.st_size == 0) return true;
  // Marked by create_temporary: a file HDF5 was writing when the process died.
  char mark[16];
  const ssize_t n = lgetxattr(path.c_str(), kTemporaryMark, mark, sizeof mark);
  if (n == 9 && std::memcmp(mark, "temporary", 9) == 0) return true;
  return g_rcsim_file_test && g_rcsim_file_test(path);
}

void replace_with(const std::string& tmp, const std::string& target) {
  TargetAtStart at;
  bool known = false;
  {
    const std::lock_guard<std::mutex> hold(g_temporaries_mutex);
    const auto it = temporaries().find(tmp);
    if (it != temporaries().end()) {
      at = it->second;
      known = true;
    }
  }
  // The finished file is no temporary: its mark goes (where there is none, nothing happens).
  (void)lremovexattr(tmp.c_str(), kTemporaryMark);
  // A target that is not the one rcsim checked when it started (absent then, or another file
  // now) is not rcsim's: never replaced.
  struct stat now {};
  const bool exists_now = lstat(target.c_str(), &now) == 0;
  const bool same = exists_now && at.existed && now.st_dev == at.dev && now.st_ino == at.ino;
  int err = 0;
  if (known && exists_now && !same) {
    err = EEXIST;
  } else if (known && !exists_now) {
    err = rename_no_replace(tmp, target);
  } else if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    err = errno;
  }
  if (err == EEXIST)
    throw RuntimeError("'" + target + "' appeared or was replaced while rcsim was writing it (not by this run); "
                       "refusing to replace it (its new result is discarded; move that file away and rerun)");
  if (err != 0) throw RuntimeError("cannot rename '" + tmp + "' to '" + target + "': " + os_error(err));
  const std::lock_guard<std::mutex> hold(g_temporaries_mutex);
  temporaries().erase(tmp);
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

void copy_whole_file(const std::string& source, const std::string& path) {
  const int in = open(source.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (in < 0) {
    const int err = errno;
    throw RuntimeError("cannot read '" + source + "': " + os_error(err));
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0) {
    const int err = errno;
    close(in);
    throw RuntimeError("cannot write '" + path + "': " + os_error(err));
  }
  std::vector<char> buf(1 << 20);
  int err = 0;
  bool reading = false;
  for (;;) {
    const ssize_t r = read(in, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      err = errno;
      reading = true;
      break;
    }
    if (r == 0) break;
    for (ssize_t done = 0; done < r && err == 0;) {
      const ssize_t w = write(fd, buf.data() + done, static_cast<std::size_t>(r - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) err = errno;
      else done += w;
    }
    if (err) break;
  }
  close(in);
  if (close(fd) != 0 && err == 0) err = errno;
  if (err != 0) throw RuntimeError("cannot " + std::string(reading ? "read '" + source : "write '" + path) + "': " + os_error(err));
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
    // Never write through a link someone planted at the lock's name (a hard link to another file
    // would have that file truncated): the lock file is a regular file with exactly one name.
    struct stat opened {};
    if (fstat(fd, &opened) == 0 && S_ISREG(opened.st_mode) && opened.st_nlink == 0) {
      close(fd);  // removed by the holder before us as we opened it: open the name again
      continue;
    }
    if (fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode) || opened.st_nlink != 1) {
      const auto links = static_cast<unsigned long long>(opened.st_nlink);
      close(fd);
      throw RuntimeError("lock file '" + path_ + "' for " + what + " is not rcsim's (" +
                         (S_ISREG(opened.st_mode) ? "it has " + std::to_string(links) + " hard links" : std::string("not a regular file")) +
                         "); it was left alone: remove it if no rcsim process uses it");
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
      dev_ = held.st_dev;
      ino_ = held.st_ino;
      return;
    }
    close(fd);
  }
  throw RuntimeError("cannot lock '" + path_ + "': it keeps being replaced");
}

ExclusiveLock::~ExclusiveLock() {
  if (fd_ >= 0) {
    struct stat now {};  // only our own lock file, never one swapped in at its name
    if (lstat(path_.c_str(), &now) == 0 && now.st_dev == dev_ && now.st_ino == ino_)
      unlink(path_.c_str());  // while still holding the lock
    close(fd_);
  }
}

}  // namespace rcsim
