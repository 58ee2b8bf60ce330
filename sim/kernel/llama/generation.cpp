#include "kernel/llama/generation.hpp"

#include <cmath>
#include <sstream>
#include <string>

#include "kernel/support/errors.hpp"
#include "kernel/llama/decoder.hpp"
#include "kernel/model/random.hpp"

namespace rcsim::llama {

namespace {


template <class T>
std::vector<int> generate_in(const LlamaModelT<T>& m, const GenerateOptions& o) {
  RandomStream rng(o.seed, o.sequence, kGenerateStream);
  ForwardOptions fo;
  fo.cancel = o.cancel;
  Decoder<T> decoder(m, fo);
  RowVector logits;
  for (const int id : o.prompt) logits = decoder.feed(id);
  std::vector<int> out;
  for (int step = 0; step < o.steps; ++step) {
    const int id = choose_token(logits, o.temperature, o.temperature > 0 ? rng.uniform() : 0.0);
    out.push_back(id);
    if (step + 1 < o.steps) logits = decoder.feed(id);
  }
  return out;
}

}  // namespace

int choose_token(const Eigen::Ref<const RowVector>& logits, double temperature, double u) {
  Eigen::Index best = 0;
  for (Eigen::Index i = 1; i < logits.size(); ++i)
    if (logits(i) > logits(best)) best = i;
  if (temperature == 0.0) return static_cast<int>(best);
  const RowVector p = ((logits.array() - logits(best)) / temperature).exp().matrix();
  const double target = u * p.sum();
  double cdf = 0.0;
  for (Eigen::Index i = 0; i < p.size(); ++i) {
    cdf += p(i);
    if (target < cdf) return static_cast<int>(i);
  }
  return static_cast<int>(p.size() - 1);
}

std::vector<int> generate(const LlamaModel& m, const GenerateOptions& o) {
  if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature)) {
    std::ostringstream value;
    value << o.temperature;
    throw UsageError("temperature " + value.str() + " is not allowed (0 = greedy, or a positive finite number)");
  }
  if (o.steps < 0) throw UsageError("the number of steps must be >= 0, not " + std::to_string(o.steps));
  if (o.prompt.empty()) throw UsageError("the prompt is empty (start from the BOS id " + std::to_string(kBos) + ")");
  const long long total = static_cast<long long>(o.prompt.size()) + o.steps;
  if (total > m.config.seq_len)
    throw UsageError(std::to_string(o.prompt.size()) + " prompt ids + " + std::to_string(o.steps) +
                     " steps exceed the model's context (seq_len " + std::to_string(m.config.seq_len) + ")");
  if (o.steps == 0) return {};
  return o.single ? generate_in(to_float(m), o) : generate_in(m, o);
}

}  // namespace rcsim::llama
