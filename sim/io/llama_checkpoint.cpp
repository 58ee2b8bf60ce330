#include "io/llama_checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "io/input_digest.hpp"
#include "io/input_file.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

namespace {

using llama::LlamaConfig;

constexpr std::uint32_t kMagic = 0x616b3432;  // "ak42" as a little-endian uint32 (export.py)
constexpr std::size_t kVersionedHeader = 256;
constexpr long long kMaxBytes = 1LL << 34;  // 16 GiB: far beyond the models rcsim studies

std::int32_t int_at(const std::vector<char>& bytes, std::size_t offset) {
  std::int32_t v = 0;
  std::memcpy(&v, bytes.data() + offset, sizeof v);
  return v;
}

// Float32 arrays in file order, each checked finite.
class FloatCursor {
 public:
  FloatCursor(const std::vector<char>& bytes, std::size_t offset, std::string file)
      : bytes_(bytes), offset_(offset), file_(std::move(file)) {}

  // `rows` x `cols` [out, in] row-major, for layer `layer` (-1: none) of the array `name`.
  Matrix matrix(const std::string& name, int layer, int rows, int cols) {
    Matrix m(rows, cols);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) m(i, j) = next(name, layer, static_cast<long long>(i) * cols + j);
    return m;
  }
  Vector vector(const std::string& name, int layer, int size) { return matrix(name, layer, size, 1).col(0); }
  void skip(long long floats) { offset_ += static_cast<std::size_t>(floats) * 4; }

 private:
  double next(const std::string& name, int layer, long long entry) {
    float f = 0;
    std::memcpy(&f, bytes_.data() + offset_, 4);
    offset_ += 4;
    if (!std::isfinite(f))
      throw UsageError("llama2.c checkpoint '" + file_ + "': non-finite value (" + (std::isnan(f) ? "nan" : "inf") +
                       ") in " + name + (layer >= 0 ? " of layer " + std::to_string(layer) : "") + " at entry " +
                       std::to_string(entry));
    return f;
  }
  const std::vector<char>& bytes_;
  std::size_t offset_;
  std::string file_;
};

// The float32 values the arrays of `c` need (without the RoPE tables or the classifier).
long long core_floats(const LlamaConfig& c) {
  const long long d = c.dim, m = c.hidden, L = c.layers, kv = c.kv_dim(), V = c.vocab;
  return V * d + L * (2 * d + 2 * d * d + 2 * kv * d + 3 * m * d) + d;
}

std::string header_text(const LlamaConfig& c) {
  return "dim " + std::to_string(c.dim) + ", hidden_dim " + std::to_string(c.hidden) + ", n_layers " +
         std::to_string(c.layers) + ", n_heads " + std::to_string(c.heads) + ", n_kv_heads " +
         std::to_string(c.kv_heads) + ", vocab_size " + std::to_string(c.vocab) + ", seq_len " +
         std::to_string(c.seq_len);
}

// The per-layer arrays of `name` [L, rows, cols] into each block's member.
void read_layers(FloatCursor& cur, llama::LlamaModel& m, const std::string& name, Matrix llama::LlamaBlock::*member,
                 int rows, int cols) {
  for (int l = 0; l < m.config.layers; ++l) m.blocks[static_cast<std::size_t>(l)].*member = cur.matrix(name, l, rows, cols);
}
void read_gains(FloatCursor& cur, llama::LlamaModel& m, const std::string& name, Vector llama::LlamaBlock::*member) {
  for (int l = 0; l < m.config.layers; ++l) m.blocks[static_cast<std::size_t>(l)].*member = cur.vector(name, l, m.config.dim);
}

void read_matrices(FloatCursor& cur, llama::LlamaModel& m) {
  const LlamaConfig& c = m.config;
  read_layers(cur, m, "wq", &llama::LlamaBlock::wq, c.dim, c.dim);
  read_layers(cur, m, "wk", &llama::LlamaBlock::wk, c.kv_dim(), c.dim);
  read_layers(cur, m, "wv", &llama::LlamaBlock::wv, c.kv_dim(), c.dim);
  read_layers(cur, m, "wo", &llama::LlamaBlock::wo, c.dim, c.dim);
}
void read_mlp(FloatCursor& cur, llama::LlamaModel& m) {
  const LlamaConfig& c = m.config;
  read_layers(cur, m, "w1", &llama::LlamaBlock::w1, c.hidden, c.dim);
  read_layers(cur, m, "w2", &llama::LlamaBlock::w2, c.dim, c.hidden);
  read_layers(cur, m, "w3", &llama::LlamaBlock::w3, c.hidden, c.dim);
}


// The header of a checkpoint of `size` bytes (`head`: its first min(size, 256) bytes) read into
// `out` (version, config); returns the header's length. The size the header's arrays need is
// checked against `size` here, before the arrays are read: the header is the file's size cap.
std::size_t read_header(const std::vector<char>& head, long long size, const std::string& what, LlamaCheckpoint& out) {
  if (size < 28) throw UsageError(what + "truncated: " + std::to_string(size) + " bytes, shorter than the 28-byte header");
  std::size_t header = 28, first = 0;
  if (static_cast<std::uint32_t>(int_at(head, 0)) == kMagic) {
    if (size < static_cast<long long>(kVersionedHeader))
      throw UsageError(what + "truncated: " + std::to_string(size) + " bytes, shorter than the 256-byte header");
    out.version = int_at(head, 4);
    if (out.version != 1)
      throw UsageError(what + "format version " + std::to_string(out.version) +
                       " found; rcsim reads the legacy format and version 1 (float32); version 2 is int8-quantised");
    header = kVersionedHeader;
    first = 8;
  }
  LlamaConfig& c = out.model.config;
  c.dim = int_at(head, first);
  c.hidden = int_at(head, first + 4);
  c.layers = int_at(head, first + 8);
  c.heads = int_at(head, first + 12);
  c.kv_heads = int_at(head, first + 16);
  const std::int32_t vocab = int_at(head, first + 20);
  c.seq_len = int_at(head, first + 24);
  c.vocab = out.version == 1 ? vocab : (vocab == INT32_MIN ? 0 : std::abs(vocab));
  c.shared_classifier = out.version == 1 ? head[first + 28] != 0 : vocab > 0;
  if (const std::string p = llama::config_problem(c); !p.empty())
    throw UsageError(what + "header (" + (out.version ? "version 1" : "legacy") + ") does not describe a model: " + p +
                     " (not a llama2.c checkpoint?)");
  const long long rope = out.version == 0 ? static_cast<long long>(c.seq_len) * c.head_size() : 0;
  const long long cls = c.shared_classifier ? 0 : static_cast<long long>(c.vocab) * c.dim;
  const long long need = static_cast<long long>(header) + 4 * (core_floats(c) + rope + cls);
  if (size != need)
    throw UsageError(what + std::to_string(size) + " bytes, but its header (" + header_text(c) + ", " +
                     (c.shared_classifier ? "shared" : "unshared") + " classifier) needs " + std::to_string(need) +
                     (size < need ? " (truncated)" : " (trailing bytes)"));
  return header;
}

}  // namespace

LlamaCheckpoint read_llama_checkpoint(const std::string& path) {
  const std::string file = printable(path);
  const std::string what = "llama2.c checkpoint '" + file + "': ";
  // Regular files only, the size known before reading (io/input_file.hpp); the header first, and
  // the rest read only when the header accounts for every byte.
  const InputFile in(path, "llama2.c checkpoint '" + file + "'", kMaxBytes, "16 GiB (the largest checkpoint rcsim reads)");
  LlamaCheckpoint out;
  const std::size_t header =
      read_header(in.read(0, static_cast<std::size_t>(std::min<long long>(in.size(), kVersionedHeader))), in.size(), what, out);
  const LlamaConfig& c = out.model.config;
  const long long rope = out.version == 0 ? static_cast<long long>(c.seq_len) * c.head_size() : 0;
  const std::vector<char> bytes = in.read_all();
  FloatCursor cur(bytes, header, file);
  llama::LlamaModel& m = out.model;
  m.blocks.resize(static_cast<std::size_t>(c.layers));
  if (out.version == 0) {
    m.embedding = cur.matrix("token_embedding", -1, c.vocab, c.dim);
    read_gains(cur, m, "rms_att_weight", &llama::LlamaBlock::attn_norm);
    read_matrices(cur, m);
    read_gains(cur, m, "rms_ffn_weight", &llama::LlamaBlock::mlp_norm);
    read_mlp(cur, m);
    m.final_norm = cur.vector("rms_final_weight", -1, c.dim);
    cur.skip(rope);
  } else {
    read_gains(cur, m, "rms_att_weight", &llama::LlamaBlock::attn_norm);
    read_gains(cur, m, "rms_ffn_weight", &llama::LlamaBlock::mlp_norm);
    m.final_norm = cur.vector("rms_final_weight", -1, c.dim);
    m.embedding = cur.matrix("token_embedding", -1, c.vocab, c.dim);
    read_matrices(cur, m);
    read_mlp(cur, m);
  }
  m.classifier = c.shared_classifier ? m.embedding : cur.matrix("classifier", -1, c.vocab, c.dim);
  out.sha256 = sha256_of_bytes(bytes.data(), bytes.size());
  return out;
}

}  // namespace rcsim
