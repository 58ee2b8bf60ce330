#include "app/llama_run.hpp"

#include <limits>
#include <sstream>

#include "config/config.hpp"
#include "io/hdf5_file.hpp"
#include "io/inputs.hpp"
#include "io/output_file.hpp"
#include "io/safe_file.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/measures/metrics.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

namespace {

// The main block's keys of the model's blocks (kernel/llama/llama_block.hpp), so that the file's
// configuration and a plot's title state the architecture; the weights are the checkpoint's.
Config nearest_config(const llama::LlamaModel& m, const LlamaRunRequest& q, int depth) {
  const auto n = q.sequences.front().size();
  const llama::LlamaConfig& c = m.config;
  const auto s = [](auto v) { return std::to_string(v); };
  std::ostringstream theta;
  theta << c.rope_theta;
  return make_config({{"model.tokens", s(n)},
                      {"model.dim", s(c.dim)},
                      {"model.layers", s(depth)},
                      {"model.heads", s(c.heads)},
                      {"model.kv_heads", s(c.kv_heads)},
                      {"model.key_dim", s(c.head_size())},
                      {"model.value_dim", s(c.head_size())},
                      {"mask.type", "causal"},
                      {"norm.type", q.forward.norm ? "rmsnorm" : "none"},
                      {"norm.position", "pre"},
                      {"residual.alpha", "1"},
                      {"attention.rope", "true"},
                      {"attention.rope_theta", theta.str()},
                      {"mlp.width", s(c.hidden)},
                      {"mlp.activation", "swiglu"},
                      {"run.trials", s(q.sequences.size())},
                      {"run.precision", q.single ? "float32" : "float64"},
                      {"output.spectrum", "true"},
                      {"output.tokens", "none"},
                      {"output.file", q.output}});
}

std::string pretrained_section(const llama::LlamaModel& m, const LlamaRunRequest& q, int depth) {
  const llama::LlamaConfig& c = m.config;
  std::ostringstream os;
  os << "\n[pretrained]\n"
     << "# written by rcsim generate --measure: X(0) = embedding rows of /token_ids, X(t) = the residual stream\n"
     << "# after block t of the llama2.c checkpoint below (blocks repeat cyclically beyond its layers);\n"
     << "# the keys above are the main block's settings of these blocks; the weights are the checkpoint's\n"
     << "checkpoint = " << q.checkpoint << "\n"
     << "checkpoint_sha256 = " << q.checkpoint_sha256 << "\n"
     << "weights = " << q.weights << "\n"
     << "architecture = dim " << c.dim << ", hidden " << c.hidden << ", layers " << c.layers << ", heads " << c.heads
     << ", kv_heads " << c.kv_heads << ", vocab " << c.vocab << ", seq_len " << c.seq_len << "\n"
     << "norm = " << (q.forward.norm ? "rmsnorm" : "none") << "\n"
     << "depth = " << depth << "\n";
  return os.str();
}

// The token measures of every state of one sequence into row `trial` of `r`.
void measure_sequence(const EngineSetup& s, const std::vector<Matrix>& states, int trial, RunResults& r) {
  const ModelSpec& c = s.config;
  const auto ti = static_cast<std::size_t>(trial);
  MeasureOptions opt{c.metrics.rank_rtol, c.metrics.rank_atol, s.max_rank_input};
  r.spectrum[ti] = Matrix::Constant(static_cast<Eigen::Index>(r.layer_index.size()), r.spectrum_size,
                                    std::numeric_limits<double>::quiet_NaN());
  Vector sigma;
  for (std::size_t t = 0; t < states.size(); ++t) {
    const Matrix& X = states[t];
    if (!all_finite(X)) {
      r.nonfinite_layer[ti] = static_cast<int>(t);
      break;
    }
    const int col = r.column_of_layer[t];
    if (col < 0) continue;
    opt.max_rank = t == 0 ? s.max_rank_input : s.max_rank;
    const TokenMeasures tm = measure_tokens(X, opt, sigma);
    for (std::size_t i = 0; i < r.token_defs.size(); ++i) {
      const MeasureDef& d = *r.token_defs[i];
      if (d.pass == MeasurePass::core) r.token[i](trial, col) = tm.*d.core_token;
      else if (d.pass == MeasurePass::state) r.token[i](trial, col) = d.state(c, X, sigma);
    }
    r.spectrum[ti].row(col) = sigma.transpose();
    if (r.underflow_layer[ti] < 0 && !(tm.mu >= std::numeric_limits<double>::min())) r.underflow_layer[ti] = static_cast<int>(t);
  }
}

void write_token_ids(const std::string& source, const std::string& dest, const LlamaRunRequest& q) {
  h5::File f = h5::File::open_copy_on_disk(source, dest);
  const std::size_t S = q.sequences.size(), N = q.sequences.front().size();
  std::vector<std::int64_t> ids;
  for (const auto& seq : q.sequences) ids.insert(ids.end(), seq.begin(), seq.end());
  {
    const h5::Dataset ds = f.write("token_ids", {S, N}, ids.data());
    ds.set_attr("long_name", "token ids of each trial's sequence (row i of X(0) is the embedding of id i)");
    f.label_axes(ds, {"trial", "token"});
    f.open_dataset("config").set_attr("long_name",
                                      "the nearest rcsim run configuration and the [pretrained] section (INI); "
                                      "rcsim run does not reproduce this run (pretrained weights)");
  }
  f.close();
}

}  // namespace

std::string write_llama_run(const llama::LlamaModel& m, const LlamaRunRequest& q, const Provenance& p, OutputFile& file) {
  if (q.sequences.empty()) throw UsageError("no token sequence to run");
  for (const auto& seq : q.sequences)
    if (seq.size() != q.sequences.front().size() || seq.empty())
      throw UsageError("the sequences have different lengths (" + std::to_string(q.sequences.front().size()) + " and " +
                       std::to_string(seq.size()) + "); a run file holds sequences of one length N");
  const int depth = q.forward.depth > 0 ? q.forward.depth : m.config.layers;
  const Config c = nearest_config(m, q, depth);
  const EngineSetup s = prepare(c);
  RunResults r = allocate_results(s);
  r.spectrum.assign(r.spectrum.size(), Matrix());
  for (std::size_t k = 0; k < q.sequences.size(); ++k)
    measure_sequence(s, llama::sequence_states(m, q.sequences[k], q.single, q.forward), static_cast<int>(k), r);
  const std::string body = create_temporary(file.target());
  try {
    InputDigests inputs{{"checkpoint", q.checkpoint, q.checkpoint_sha256, {}}};
    write_run_file(body, c.to_ini() + pretrained_section(m, q, depth), s, r, p, inputs);
    write_token_ids(body, file.temporary(), q);
  } catch (...) {
    remove_quietly(body);
    throw;
  }
  remove_quietly(body);
  file.publish();
  return file.target();
}

std::vector<std::vector<int>> parse_id_sequences(const std::string& text, const std::string& where) {
  std::vector<std::vector<int>> out;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    line = line.substr(0, line.find('#'));
    for (char& ch : line)
      if (ch == ',' || ch == '\t' || ch == '\r') ch = ' ';
    std::istringstream words(line);
    std::vector<int> seq;
    for (std::string w; words >> w;) {
      std::size_t used = 0;
      long long v = -1;
      try {
        v = std::stoll(w, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != w.size() || v < 0 || v > std::numeric_limits<int>::max())
        throw UsageError(where + ", line " + std::to_string(number) + ": '" + printable(w) +
                         "' is not a token id (a non-negative integer)");
      seq.push_back(static_cast<int>(v));
    }
    if (!seq.empty()) out.push_back(std::move(seq));
  }
  if (out.empty()) throw UsageError(where + ": no token ids");
  return out;
}

}  // namespace rcsim
