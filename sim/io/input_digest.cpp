#include "io/input_digest.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include "io/hdf5_file.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"
#include "kernel/model/weights.hpp"

namespace rcsim {

namespace {

FileSignature signature_of(const struct stat& st) {
  FileSignature s;
  s.dev = static_cast<unsigned long long>(st.st_dev);
  s.ino = static_cast<unsigned long long>(st.st_ino);
  s.size = static_cast<long long>(st.st_size);
  s.mtime_ns = static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  s.ctime_ns = static_cast<long long>(st.st_ctim.tv_sec) * 1000000000LL + st.st_ctim.tv_nsec;
  return s;
}

std::string hex(const unsigned char* p, unsigned n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

// One SHA-256 computation (OpenSSL's EVP interface).
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      throw RuntimeError("SHA-256: OpenSSL could not start a digest");
  }
  void update(const void* p, std::size_t n) {
    if (EVP_DigestUpdate(ctx_.get(), p, n) != 1) throw RuntimeError("SHA-256: OpenSSL digest update failed");
  }
  std::string hex_digest() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), md, &n) != 1) throw RuntimeError("SHA-256: OpenSSL digest failed");
    return hex(md, n);
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

std::string who(const std::string& key, const std::string& path) {
  return "key '" + key + "' ('" + printable(path) + "')";
}

// The digest of `path` and the signature it had while hashed (the same before and after).
std::string hash_file(const std::string& path, const std::string& key, FileSignature& sig) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw UsageError(who(key, path) + ": cannot read it: " + std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat before {}, after {};
  if (fstat(fd, &before) != 0 || !S_ISREG(before.st_mode))
    throw UsageError(who(key, path) + " is not a regular file, expected an HDF5 file");
  Sha256 sha;
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw RuntimeError(who(key, path) + ": read error: " + std::strerror(errno));
    if (n == 0) break;
    sha.update(buf.data(), static_cast<std::size_t>(n));
  }
  if (fstat(fd, &after) != 0 || signature_of(before) != signature_of(after))
    throw RuntimeError(who(key, path) + " changed while rcsim read it; rerun when it is no longer being written");
  sig = signature_of(before);
  return sha.hex_digest();
}

// Digests already computed in this process, by path, valid while the signature is unchanged.
struct DigestCache {
  std::mutex mutex;
  std::map<std::string, std::pair<FileSignature, std::string>> entries;
};
DigestCache& cache() {
  static DigestCache c;
  return c;
}

InputDigest digest_input(const std::string& key, const std::string& path) {
  // The reader's own checks first, so that a missing or non-HDF5 file gets the message it always had.
  (void)h5::File::open_read(path, key);
  InputDigest d{key, path, "", {}};
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    const std::lock_guard<std::mutex> lock(cache().mutex);
    const auto it = cache().entries.find(path);
    if (it != cache().entries.end() && it->second.first == signature_of(st)) {
      d.signature = it->second.first;
      d.sha256 = it->second.second;
      return d;
    }
  }
  d.sha256 = hash_file(path, key, d.signature);
  const std::lock_guard<std::mutex> lock(cache().mutex);
  cache().entries[path] = {d.signature, d.sha256};
  return d;
}

std::map<std::string, std::string> parse_digests(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find(" = ");
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

std::string short_digest(const std::string& d) { return printable(d.substr(0, 16)) + (d.size() > 16 ? "..." : ""); }

}  // namespace

std::string sha256_of_bytes(const void* data, std::size_t size) {
  Sha256 sha;
  sha.update(data, size);
  return sha.hex_digest();
}

std::string sha256_of_file(const std::string& path, const std::string& key) {
  FileSignature sig;
  return hash_file(path, key, sig);
}

InputDigests input_digests(const ModelSpec& c, bool arrays, bool mask) {
  InputDigests out;
  auto add = [&](const std::string& key, const std::string& path) {
    for (const InputDigest& d : out)
      if (d.key == key) return;
    out.push_back(digest_input(key, path));
  };
  // The order in which prepare() reads them: the mask, then the arrays.
  if (mask && c.mask.type == MaskType::custom) add("mask.file", c.mask.file);
  if (arrays) {
    InputArrays unused;
    for (const InputRequirement& r : input_requirements(c, unused)) {
      const std::string key = r.key;
      add(key, key == "init.file" ? c.init.file : c.weights.file);
    }
  }
  return out;
}

void check_inputs_unchanged(const InputDigests& inputs) {
  for (const InputDigest& d : inputs) {
    struct stat st {};
    if (stat(d.path.c_str(), &st) != 0 || signature_of(st) != d.signature)
      throw RuntimeError(who(d.key, d.path) + " changed while rcsim read it (after its SHA-256 was taken); "
                         "rerun when it is no longer being written");
  }
}

std::string digests_text(const InputDigests& inputs) {
  std::string out;
  for (const InputDigest& d : inputs) out += d.key + " = " + d.sha256 + "\n";
  return out;
}

std::string digest_difference(const std::string& stored, const InputDigests& wanted) {
  if (stored == digests_text(wanted)) return "";
  const auto old = parse_digests(stored);
  for (const InputDigest& d : wanted) {
    const auto it = old.find(d.key);
    if (it == old.end())
      return "no SHA-256 of " + who(d.key, d.path) +
             " is recorded (written before rcsim recorded its inputs' content, or without that input)";
    if (it->second != d.sha256)
      return "the content of " + who(d.key, d.path) + " changed: sha256 " + short_digest(it->second) + " -> " +
             short_digest(d.sha256);
  }
  for (const auto& [key, digest] : old) {
    bool used = false;
    for (const InputDigest& d : wanted) used |= d.key == key;
    if (!used) return "the stored inputs name key '" + printable(key) + "', which this run does not read";
  }
  return "the stored input digests differ (" + printable(stored) + ")";
}

}  // namespace rcsim
