// Writing files without losing or overwriting anything: temporaries created exclusively beside
// their target, a checked rename, refusal to replace what is not a regular file, and an
// exclusive lock per output so that two processes never write the same file. Plain POSIX (no
// HDF5 here); hdf5/hdf5_file.hpp adds the checked close of HDF5 files.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <ctime>
#include <string>

namespace rcsim {

// Create an empty temporary file for `target` in the same directory, named
// ".NAME.XXXXXX.tmp" with an unpredictable suffix (mkstemp: O_CREAT | O_EXCL, so it never follows
// a symlink and never reuses an existing file), permissions 0666 & ~umask. Returns its path.
// Throws RuntimeError with the OS error (e.g. the directory is not writable).
std::string create_temporary(const std::string& target);

// Remove the temporaries of `target` left by a killed process (".NAME.XXXXXX.tmp" beside it).
// Call only while holding the target's ExclusiveLock: then no other process is writing them.
// Only temporaries this process created, or provably rcsim's (is_stale_rcsim_temporary), are
// removed; anything else with such a name is left alone.
void remove_stale_temporaries(const std::string& target);

// True if `path` is a regular file with one name, owned by this user, last modified before
// `before`, and either empty (made by create_temporary, never written) or a file rcsim wrote
// (the test given to set_rcsim_file_test: the HDF5 layer checks the root's filetype).
bool is_stale_rcsim_temporary(const std::string& path, const struct timespec& before);
void set_rcsim_file_test(bool (*test)(const std::string&));

// Rename a complete, verified-closed temporary onto `target` (atomic on POSIX); throws
// RuntimeError with the OS error. The caller removes `tmp` on failure (remove_quietly).
// For a temporary made by create_temporary: a target absent then is never replaced (renameat2
// RENAME_NOREPLACE, or link + unlink), and a target present then is replaced only if it is still
// the same file (device and inode); otherwise RuntimeError "... appeared or was replaced ...".
void replace_with(const std::string& tmp, const std::string& target);

// Remove a file, ignoring errors (cleanup on a failure path).
void remove_quietly(const std::string& path);

// Write `size` bytes to `path` (created if absent, truncated, never through a symlink: O_NOFOLLOW),
// every write and the close checked; throws RuntimeError naming the file and the OS error
// ("No space left on device", "File too large").
void write_whole_file(const std::string& path, const void* data, std::size_t size);
// Copy the bytes of `source` to `path` as write_whole_file would write them (neither followed
// if a symlink; 1 MiB at a time; every read and write checked, RuntimeError naming the OS error).
void copy_whole_file(const std::string& source, const std::string& path);

// True if something exists at `path` (a file, directory, device, or a symlink, even dangling).
bool path_exists(const std::string& path);
// Throw UsageError naming `key` and `path` if something exists at `path` that is not a regular
// file (a directory, device, FIFO, socket or symlink): rcsim never replaces such a thing. A path
// that can only name a directory ("dir/", ".", "..") is refused too.
void require_regular_or_absent(const std::string& path, const std::string& key);

// An exclusive advisory lock (flock) on the file LOCK_PATH, held for the object's lifetime; the
// lock file holds the holder's process id and is removed on release. If another process holds
// it, the constructor throws RuntimeError: "WHAT is in use by process N (lock LOCK_PATH)".
class ExclusiveLock {
 public:
  ExclusiveLock(std::string lock_path, const std::string& what);
  ExclusiveLock(const ExclusiveLock&) = delete;
  ExclusiveLock& operator=(const ExclusiveLock&) = delete;
  ~ExclusiveLock();

 private:
  std::string path_;
  int fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

// The lock file of an output file: "OUTPUT.lock" beside it.
std::string lock_path_for(const std::string& output);

}  // namespace rcsim
