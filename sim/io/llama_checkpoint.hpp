// llama2.c's checkpoint format (karpathy/llama2.c: run.c's read_checkpoint and export.py's
// legacy_export and version1_export), read into a Llama model (kernel/llama/llama_model.hpp).
//
// Legacy ("version 0"): seven int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
// seq_len; vocab_size < 0 means an unshared classifier), then float32 arrays: token embedding
// [V, d]; rms_att [L, d]; wq [L, d, d]; wk, wv [L, kv, d]; wo [L, d, d]; rms_ffn [L, d];
// w1 [L, m, d]; w2 [L, d, m]; w3 [L, m, d]; rms_final [d]; the old RoPE tables (freq_cis_real,
// freq_cis_imag, [seq_len, head_size/2] each: skipped); the classifier [V, d] when unshared.
// Version 1: uint32 magic 0x616b3432 ("ak42"), int32 version 1, the seven int32 (vocab_size
// positive), one byte shared_classifier, zeros to 256 bytes; then rms_att [L, d], rms_ffn [L, d],
// rms_final [d], token embedding, wq, wk, wv, wo, w1, w2, w3, the classifier when unshared.
// Every matrix row-major [out, in], little-endian.
//
// A file is refused (UsageError, one line naming the file and the problem) when it is missing or
// unreadable, carries the magic with another version (version 2 is llama2.c's int8 format), has a
// header that no model fits, a size other than the header's arrays need (truncated or trailing
// bytes), or a non-finite value (naming the array, the layer and the entry).
#pragma once

#include <string>

#include "kernel/llama/llama_model.hpp"

namespace rcsim {

struct LlamaCheckpoint {
  llama::LlamaModel model;
  int version = 0;     // 0 legacy, 1
  std::string sha256;  // of the file's bytes
};

LlamaCheckpoint read_llama_checkpoint(const std::string& path);

}  // namespace rcsim
