// rcsim generate: token ids from a pretrained llama2.c checkpoint (greedy or sampled from BOS),
// and the stack run over them as X(0) -> X(t) with rcsim's measures (app/llama_run.hpp).
#include "cli/commands.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <csignal>
#include <iostream>
#include <optional>
#include <sstream>

#include "app/llama_run.hpp"
#include "io/input_file.hpp"
#include "io/llama_checkpoint.hpp"
#include "io/output_file.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/llama/generation.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

namespace {

const char* kGenerateUsage = R"(usage: rcsim generate MODEL.bin [--steps=N] [--sequences=S] [--temperature=T] [--seed=K]
                      [--precision=float64|float32] [--ids-out=FILE] [--ids=LIST | --ids-file=FILE]
                      [--measure=RUN.h5 [--weights=pretrained|random] [--norm=true|false] [--depth=D]]
                      [--force] [--config FILE]

  Read a llama2.c checkpoint (legacy or version-1 format, float32; configs/models/stories260K/
  ships one) and decode S sequences of N ids from the BOS token 1: greedy for temperature 0,
  else sampled from softmax(logits / T) with the random stream (seed K, sequence s). Each
  sequence is printed (or written to --ids-out) as one line of ids, BOS first. With --ids or
  --ids-file the sequences are given instead (one per line; ids separated by spaces or commas).
  With --measure, the model's blocks run over every sequence (all of one length) as rcsim's
  X(0) -> X(t) and every layer's token measures go to a run file (docs/user/pretrained.md).
  As for `rcsim run`, --ids-out and --measure are locked before any work and never replace an
  existing file without --force, nor ever a file the command reads (the checkpoint, --ids-file).

options (also as `name = value` lines of an INI file given with --config FILE):
)";


int integer_option(const KeyValues& v, const std::string& name, double min, double max) {
  const double x = parse_number("--" + name, v.at(name));
  if (!(x >= min && x <= max) || std::floor(x) != x)
    throw UsageError("--" + name + "=" + printable(v.at(name)) + ": expected an integer in " + number_text(min) + " .. " +
                     number_text(max));
  return static_cast<int>(x);
}

bool bool_option(const KeyValues& v, const std::string& name) {
  const std::string& t = v.at(name);
  if (t == "true" || t == "1") return true;
  if (t == "false" || t == "0") return false;
  throw UsageError("--" + name + "=" + printable(t) + ": expected true or false");
}

// A token id file: regular files only, at most this size, read through io/input_file.hpp.
constexpr long long kMaxIdsFileBytes = 256LL << 20;

std::string ids_text(const std::vector<std::vector<int>>& sequences) {
  std::ostringstream os;
  for (const auto& seq : sequences) {
    for (std::size_t i = 0; i < seq.size(); ++i) os << (i ? " " : "") << seq[i];
    os << "\n";
  }
  return os.str();
}

// Given sequences must fit the model: ids in its vocabulary, at most seq_len of them.
std::vector<std::vector<int>> fitting(std::vector<std::vector<int>> seqs, const llama::LlamaConfig& c,
                                      const std::string& where) {
  for (std::size_t k = 0; k < seqs.size(); ++k) {
    const auto& seq = seqs[k];
    if (static_cast<long long>(seq.size()) > c.seq_len)
      throw UsageError(where + ": sequence " + std::to_string(k + 1) + " has " + std::to_string(seq.size()) +
                       " ids, more than the model's context (seq_len " + std::to_string(c.seq_len) + ")");
    for (std::size_t i = 0; i < seq.size(); ++i)
      if (seq[i] >= c.vocab)
        throw UsageError(where + ": sequence " + std::to_string(k + 1) + ": token id " + std::to_string(seq[i]) +
                         " at position " + std::to_string(i) + " is outside the vocabulary 0 .. " +
                         std::to_string(c.vocab - 1));
  }
  return seqs;
}

// The sequences given (--ids, --ids-file) or decoded from BOS.
std::vector<std::vector<int>> sequences_of(const llama::LlamaModel& m, const KeyValues& v, bool single) {
  if (!v.at("ids").empty() && !v.at("ids-file").empty()) throw UsageError("give --ids or --ids-file, not both");
  if (!v.at("ids").empty()) {
    std::string list = v.at("ids");
    for (char& ch : list)
      if (ch == ';') ch = '\n';
    return fitting(parse_id_sequences(list, "--ids"), m.config, "--ids");
  }
  if (!v.at("ids-file").empty()) {
    const std::string where = "--ids-file '" + printable(v.at("ids-file")) + "'";
    const std::string text = read_text_input(v.at("ids-file"), where, kMaxIdsFileBytes, "256 MiB (the cap for a token id file)");
    return fitting(parse_id_sequences(text, where), m.config, where);
  }
  llama::GenerateOptions g;
  g.steps = integer_option(v, "steps", 0, m.config.seq_len - 1);
  g.temperature = parse_number("--temperature", v.at("temperature"));
  g.seed = static_cast<std::uint64_t>(integer_option(v, "seed", 0, 2147483647));
  g.single = single;
  g.cancel = &g_cancel;  // SIGINT, SIGTERM: Interrupted within one block
  const int count = integer_option(v, "sequences", 1, 1000000);
  std::vector<std::vector<int>> out;
  for (int s = 0; s < count; ++s) {
    g.sequence = static_cast<std::uint64_t>(s);
    std::vector<int> seq = g.prompt;
    const std::vector<int> ids = llama::generate(m, g);
    seq.insert(seq.end(), ids.begin(), ids.end());
    out.push_back(std::move(seq));
  }
  return out;
}

void measure(const llama::LlamaModel& pretrained, const LlamaCheckpoint& ck, const std::string& path,
             const std::vector<std::vector<int>>& sequences, const KeyValues& v, bool single, OutputFile& file,
             const std::string& command_line) {
  LlamaRunRequest q;
  q.sequences = sequences;
  q.single = single;
  q.forward.norm = bool_option(v, "norm");
  q.forward.depth = integer_option(v, "depth", 0, 100000);
  q.forward.cancel = &g_cancel;
  q.checkpoint = path;
  q.checkpoint_sha256 = ck.sha256;
  q.output = v.at("measure");
  const std::string weights = v.at("weights");
  if (weights != "pretrained" && weights != "random")
    throw UsageError("--weights=" + printable(weights) + ": expected pretrained or random");
  const int seed = integer_option(v, "seed", 0, 2147483647);
  if (weights == "random")
    q.weights = "random blocks (seed " + std::to_string(seed) + "), the checkpoint's embedding and classifier";
  const llama::LlamaModel model =
      weights == "random" ? llama::random_blocks(pretrained, static_cast<unsigned long long>(seed)) : pretrained;
  Provenance p;
  p.command_line = command_line;
  const std::string out = write_llama_run(model, q, p, file);
  spdlog::info("wrote {} ({} sequences of {} tokens, {} weights)", out, sequences.size(), sequences.front().size(), q.weights);
}

// generate's outputs, each through rcsim run's write path: its lock and exclusive temporary
// (OutputFile) taken before any computing, so that a second process on the same file stops at
// once, and the --force rule (refuse_existing_output): never an input, never an existing file
// without --force.
struct GenerateOutputs {
  std::optional<OutputFile> ids, run;
};
void open_outputs(const KeyValues& v, const std::string& checkpoint, const Invocation& inv, GenerateOutputs& out) {
  const std::string& ids = v.at("ids-out");
  const std::string& run = v.at("measure");
  if (!ids.empty() && !run.empty() && same_file(ids, run))
    throw UsageError("--ids-out and --measure name the same file '" + printable(ids) + "'; give two files");
  const std::vector<OutputInput> inputs = {
      {"the checkpoint", checkpoint}, {"--ids-file", v.at("ids-file")}, {"--config", inv.config_file.value_or("")}};
  if (!ids.empty()) {
    out.ids.emplace(ids, OutputOptions{"--ids-out", "output '" + ids + "'"});
    refuse_existing_output(*out.ids, "--ids-out", inputs, inv.force, "");
  }
  if (!run.empty()) {
    out.run.emplace(run, OutputOptions{"--measure", "output '" + run + "'"});
    refuse_existing_output(*out.run, "--measure", inputs, inv.force, "rcsim-run");
  }
}

}  // namespace

int cmd_generate(const Invocation& inv, const std::vector<std::string>& args) {
  std::signal(SIGINT, on_signal);  // as rcsim run: stop within one block, exit 130 with one line
  std::signal(SIGTERM, on_signal);
  std::vector<std::string> files;
  const KeyValues v = parse_command_options("generate", generate_options(), inv.keys, inv.config_file, &files);
  if (files.size() != 1)
    throw UsageError("generate: give one checkpoint file (usage: rcsim generate MODEL.bin [options]; e.g. "
                     "configs/models/stories260K/stories260K.bin)");
  const std::string precision = v.at("precision");
  if (precision != "float64" && precision != "float32")
    throw UsageError("--precision=" + printable(precision) + ": expected float64 or float32");
  const bool single = precision == "float32";
  GenerateOutputs outputs;
  open_outputs(v, files.front(), inv, outputs);
  const LlamaCheckpoint ck = read_llama_checkpoint(files.front());
  const std::vector<std::vector<int>> sequences = sequences_of(ck.model, v, single);
  const std::string text = ids_text(sequences);
  if (outputs.ids) outputs.ids->write_bytes(text);
  else if (!outputs.run) std::cout << text;
  if (outputs.run) measure(ck.model, ck, files.front(), sequences, v, single, *outputs.run, command_line_text(args));
  return 0;
}

std::vector<KeyDecl> generate_options() {
  std::vector<KeyDecl> o = {
      {"steps", "40", "ids generated after BOS per sequence (prompt + steps <= the model's seq_len)"},
      {"sequences", "1", "number of sequences S"},
      {"temperature", "0", "0: greedy; T > 0: sampled from softmax(logits / T) (the ids are drawn by rcsim's random stream, not llama2.c's)"},
      {"seed", "0", "random stream of the sampled sequences (sequence s uses stream (seed, s))"},
      {"precision", "float64", "float64 | float32: the arithmetic of the forward"},
      {"ids-out", "", "write the sequences here (one line each, BOS first) instead of printing them"},
      {"ids", "", "the sequence(s) as a list of ids (commas or spaces; ';' separates sequences) instead of decoding"},
      {"ids-file", "", "a text file of sequences (one per line) instead of decoding"},
      {"measure", "", "write every layer's token measures of the sequences to this run file"},
      {"weights", "pretrained", "pretrained | random: the checkpoint's weights, or random blocks (matrix entries "
                                "N(0, 1/fan_in), gains 1; drawn from --seed) with the checkpoint's embedding and "
                                "classifier (the same X(0))"},
      {"norm", "true", "false: every RMSNorm of the stack is the identity (measure only)"},
      {"depth", "0", "blocks applied for --measure; 0: the model's layers; more: the blocks repeat cyclically"}};
  return o;
}

std::string generate_help() { return std::string(kGenerateUsage) + options_help(generate_options()); }

}  // namespace rcsim
