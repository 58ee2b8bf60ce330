// Token sequences a pretrained model expects, without a tokenizer: decoding from the BOS token.
// Greedy (temperature 0): the id of the largest logit, the first on ties (as llama2.c's argmax).
// Sampled (temperature tau > 0): an id drawn from softmax(logits / tau) by inverting its
// cumulative sum with one uniform u in (0, 1) of rcsim's random stream (seed, sequence), so that
// sequence k of a seed is the same whatever other sequences are drawn.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "kernel/llama/llama_model.hpp"

namespace rcsim::llama {

constexpr int kBos = 1;  // llama2.c's BOS id

struct GenerateOptions {
  int steps = 0;             // ids generated after the prompt
  double temperature = 0.0;  // 0: greedy
  std::uint64_t seed = 0;    // sampled: the random stream (seed, sequence)
  std::uint64_t sequence = 0;
  bool single = false;       // float32 arithmetic
  std::vector<int> prompt = {kBos};  // fed first (non-empty)
  const std::atomic<bool>* cancel = nullptr;  // the stop flag: Interrupted within one block
};

// The `steps` ids after the prompt. UsageError when the prompt plus steps exceed seq_len, for a
// negative temperature, or a prompt id outside the vocabulary.
std::vector<int> generate(const LlamaModel& m, const GenerateOptions& o);

// The id chosen from a logits row (greedy for temperature 0, else from u in (0, 1)).
int choose_token(const Eigen::Ref<const RowVector>& logits, double temperature, double u);

}  // namespace rcsim::llama
