// A run's identity includes the content of every file it reads (issue 22): the SHA-256 of each
// input file (init.file, weights.file, mask.file), recorded in the run file (attribute
// `input_sha256` of /config) and in the checkpoint, and compared on rerun and on resume.
//
// Each file's bytes are hashed once at the start of the run; the file's identity and times
// (device, inode, size, mtime, ctime) are taken before and after hashing, and again after the
// arrays have been read (check_inputs_unchanged): a file that changed in between is an error, so
// the digest recorded is the digest of what was read. Digests are cached per process by path
// and that signature, so a sweep of many points over one weights file hashes it once.
#pragma once

#include <string>
#include <vector>

#include "kernel/model/model_spec.hpp"

namespace rcsim {

// (device, inode, size, mtime, ctime) of a file: changes whenever its content is written.
struct FileSignature {
  unsigned long long dev = 0, ino = 0;
  long long size = 0, mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileSignature& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns && ctime_ns == o.ctime_ns;
  }
  bool operator!=(const FileSignature& o) const { return !(*this == o); }
};

struct InputDigest {
  std::string key;     // "init.file", "weights.file" or "mask.file"
  std::string path;    // the file, as configured
  std::string sha256;  // 64 lower-case hex digits of the file's bytes
  FileSignature signature;  // of the file when hashed
};
using InputDigests = std::vector<InputDigest>;

// SHA-256 of a file's bytes (OpenSSL EVP), as 64 hex digits; `key` names the configuration key
// in errors (UsageError "key 'KEY': cannot read 'PATH': ...").
std::string sha256_of_file(const std::string& path, const std::string& key);
// SHA-256 of bytes in memory, as 64 hex digits.
std::string sha256_of_bytes(const void* data, std::size_t size);

// The files `c` reads and their digests, in the order init.file, weights.file, mask.file (each
// key at most once). `arrays` = false leaves out init.file and weights.file (a host program gave
// the arrays), `mask` = false leaves out mask.file. Empty for a run that reads no file.
InputDigests input_digests(const ModelSpec& c, bool arrays = true, bool mask = true);

// RuntimeError naming the key and the file if any input changed since it was hashed.
void check_inputs_unchanged(const InputDigests& inputs);

// The stored form: one line "KEY = SHA256" per input ("" for none).
std::string digests_text(const InputDigests& inputs);

// How the stored digests (`stored`, the text of digests_text; "" when the file has none) differ
// from this run's: "" if they agree, else one printable phrase naming the key and its file, e.g.
// "the content of key 'init.file' ('x0.h5') changed: sha256 0a1b2c3d4e5f... -> ...".
std::string digest_difference(const std::string& stored, const InputDigests& wanted);

}  // namespace rcsim
