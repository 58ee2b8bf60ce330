// One reader for the inputs rcsim reads that are not HDF5 (token id files, llama2.c checkpoints):
// opened without blocking (a FIFO never hangs the open), accepted only as a regular file (a
// directory, FIFO, socket or device such as /dev/zero is refused, named), its size known before
// any byte is read and checked against a cap, and read with exact, bounded reads: never "until the
// end", so a file that grows while it is read cannot make rcsim read more than it checked.
// Every refusal is a UsageError of one line starting with the caller's `what` ("--ids-file
// 'x.txt'", "llama2.c checkpoint 'm.bin'").
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

namespace rcsim {

class InputFile {
 public:
  // Opens `path` (symbolic links followed: the file they name is the input) and checks that it is
  // a regular file of at most `max_bytes` bytes (`cap_text` says what the cap is, for the message).
  InputFile(const std::string& path, std::string what, long long max_bytes, const std::string& cap_text);
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  long long size() const { return size_; }
  // Exactly `count` bytes from `offset` (UsageError if the file is shorter now than then).
  std::vector<char> read(long long offset, std::size_t count) const;
  // The whole file, as its size said when it was opened.
  std::vector<char> read_all() const { return read(0, static_cast<std::size_t>(size_)); }

 private:
  std::string what_;
  int fd_ = -1;
  long long size_ = 0;
};

// The bytes of a small text input (a token id file): InputFile with the cap `max_bytes`.
std::string read_text_input(const std::string& path, const std::string& what, long long max_bytes,
                            const std::string& cap_text);

// True if `a` and `b` name the same file: the same device and inode when both exist, else the
// same absolute, normalised path (an output and an input that do not exist yet).
bool same_file(const std::string& a, const std::string& b);

}  // namespace rcsim
