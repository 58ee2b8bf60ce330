// rcsim._engine's Llama part: a llama2.c checkpoint read by rcsim's reader (io/llama_checkpoint)
// as a LlamaModel object, its logits, residual-stream states and generated ids
// (python/rcsim/pretrained.py wraps them as rcsim.load_model and rcsim.generate, after checking
// the arguments with rcsim._validate), and the gradients of a scalar loss of a sequence
// (kernel/llama/llama_backward.hpp; Model.gradients). Computation runs without the GIL and stops
// within one block on Ctrl-C (run_interruptible: KeyboardInterrupt).
#include <pybind11/eigen.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "python/interruptible.hpp"
#include "io/llama_checkpoint.hpp"
#include "kernel/llama/generation.hpp"
#include "kernel/llama/llama_backward.hpp"
#include "kernel/llama/llama_forward.hpp"

namespace py = pybind11;

namespace {

using rcsim::LlamaCheckpoint;
using rcsim_python::run_interruptible;
namespace llama = rcsim::llama;

py::dict config_dict(const llama::LlamaConfig& c) {
  py::dict d;
  d["dim"] = c.dim;
  d["hidden_dim"] = c.hidden;
  d["n_layers"] = c.layers;
  d["n_heads"] = c.heads;
  d["n_kv_heads"] = c.kv_heads;
  d["vocab_size"] = c.vocab;
  d["seq_len"] = c.seq_len;
  d["shared_classifier"] = c.shared_classifier;
  d["norm_eps"] = c.norm_eps;
  d["rope_theta"] = c.rope_theta;
  return d;
}

// Every array as float64 NumPy, [out, in] as the checkpoint stores them; per-layer ones stacked [L, ...].
py::dict weights_dict(const llama::LlamaModel& m) {
  py::dict d;
  using RowMajor = rcsim::RowMajorMatrix;
  const auto stack = [&](auto member) {
    std::vector<RowMajor> out;
    for (const auto& b : m.blocks) out.push_back(RowMajor(b.*member));
    return out;
  };
  const auto gains = [&](auto member) {
    RowMajor g(m.config.layers, m.config.dim);
    for (int l = 0; l < m.config.layers; ++l) g.row(l) = (m.blocks[static_cast<std::size_t>(l)].*member).transpose();
    return g;
  };
  d["token_embedding"] = RowMajor(m.embedding);
  d["rms_att_weight"] = gains(&llama::LlamaBlock::attn_norm);
  d["rms_ffn_weight"] = gains(&llama::LlamaBlock::mlp_norm);
  for (const auto& [name, member] : std::vector<std::pair<const char*, rcsim::Matrix llama::LlamaBlock::*>>{
           {"wq", &llama::LlamaBlock::wq}, {"wk", &llama::LlamaBlock::wk}, {"wv", &llama::LlamaBlock::wv},
           {"wo", &llama::LlamaBlock::wo}, {"w1", &llama::LlamaBlock::w1}, {"w2", &llama::LlamaBlock::w2},
           {"w3", &llama::LlamaBlock::w3}})
    d[name] = stack(member);
  d["rms_final_weight"] = rcsim::Vector(m.final_norm);
  d["classifier"] = RowMajor(m.classifier);
  return d;
}

// The gradients as weights_dict lays out the weights, with "loss", "X" (X(depth)) and "dX"
// (dL/dX(0) .. dL/dX(depth)). token_embedding: the rows of dL/dX(0) added at their ids, plus the
// classifier's gradient when the classifier is the embedding; classifier and rms_final_weight: zero
// for a cotangent loss of X(depth) (they do not enter it).
py::dict gradients_dict(const llama::LlamaModel& m, const std::vector<int>& ids, const llama::LlamaGradients& g) {
  const llama::LlamaConfig& c = m.config;
  llama::LlamaModel gm;
  gm.config = c;
  gm.blocks = g.blocks;
  const bool cross_entropy = g.classifier.size() > 0;
  gm.final_norm = cross_entropy ? g.final_norm : rcsim::Vector::Zero(c.dim);
  gm.classifier = cross_entropy ? g.classifier : rcsim::Matrix::Zero(c.vocab, c.dim);
  gm.embedding = rcsim::Matrix::Zero(c.vocab, c.dim);
  for (std::size_t t = 0; t < ids.size(); ++t) gm.embedding.row(ids[t]) += g.dstates[0].row(static_cast<Eigen::Index>(t));
  if (c.shared_classifier) gm.embedding += gm.classifier;
  py::dict d = weights_dict(gm);
  d["loss"] = g.loss;
  d["X"] = rcsim::RowMajorMatrix(g.X);
  std::vector<rcsim::RowMajorMatrix> dX;
  for (const auto& x : g.dstates) dX.emplace_back(x);
  d["dX"] = dX;
  return d;
}

}  // namespace

void register_llama(py::module_& m) {
  py::class_<LlamaCheckpoint>(m, "LlamaModel", "A llama2.c checkpoint read by rcsim (rcsim.load_model).")
      .def_property_readonly("config", [](const LlamaCheckpoint& c) { return config_dict(c.model.config); })
      .def_readonly("version", &LlamaCheckpoint::version)
      .def_readonly("sha256", &LlamaCheckpoint::sha256)
      .def("weights", [](const LlamaCheckpoint& c) { return weights_dict(c.model); })
      .def(
          "logits",
          [](const LlamaCheckpoint& c, const std::vector<int>& ids, bool single) {
            return rcsim::RowMajorMatrix(run_interruptible([&](const std::atomic<bool>* cancel) {
              return llama::sequence_logits(c.model, ids, single, {true, 0, cancel});
            }));
          },
          py::arg("ids"), py::arg("single") = false)
      .def(
          "states",
          [](const LlamaCheckpoint& c, const std::vector<int>& ids, bool single, bool norm, int depth) {
            std::vector<rcsim::RowMajorMatrix> out;
            for (const auto& x : run_interruptible([&](const std::atomic<bool>* cancel) {
                   return llama::sequence_states(c.model, ids, single, {norm, depth, cancel});
                 }))
              out.emplace_back(x);
            return out;
          },
          py::arg("ids"), py::arg("single") = false, py::arg("norm") = true, py::arg("depth") = 0)
      .def(
          "gradients",
          [](const LlamaCheckpoint& c, const std::vector<int>& ids, const std::vector<int>& targets,
             const std::optional<rcsim::Matrix>& cotangent, bool norm, int depth, bool single) {
            const llama::LlamaGradients g = run_interruptible([&](const std::atomic<bool>* cancel) {
              const llama::ForwardOptions o{norm, depth, cancel};
              return cotangent ? llama::stack_gradients(c.model, llama::embed(c.model, ids), *cotangent, o, single)
                               : llama::loss_gradients(c.model, ids, targets, o, single);
            });
            return gradients_dict(c.model, ids, g);
          },
          py::arg("ids"), py::arg("targets"), py::arg("cotangent"), py::arg("norm") = true, py::arg("depth") = 0,
          py::arg("single") = false);
  m.def("load_llama", &rcsim::read_llama_checkpoint, py::arg("path"), py::call_guard<py::gil_scoped_release>(),
        "Read a llama2.c checkpoint (legacy or version 1).");
  m.def(
      "llama_random_blocks",
      [](const LlamaCheckpoint& c, unsigned long long seed) {
        LlamaCheckpoint r = c;
        r.model = llama::random_blocks(c.model, seed);
        return r;
      },
      py::arg("model"), py::arg("seed"), "The model with random blocks (its embedding and classifier kept).");
  m.def(
      "llama_generate",
      [](const LlamaCheckpoint& c, int steps, double temperature, unsigned long long seed, unsigned long long sequence,
         bool single) {
        llama::GenerateOptions o;
        o.steps = steps;
        o.temperature = temperature;
        o.seed = seed;
        o.sequence = sequence;
        o.single = single;
        return run_interruptible([&](const std::atomic<bool>* cancel) {
          o.cancel = cancel;
          return llama::generate(c.model, o);
        });
      },
      py::arg("model"), py::arg("steps"), py::arg("temperature") = 0.0, py::arg("seed") = 0, py::arg("sequence") = 0,
      py::arg("single") = false, "The ids after BOS decoded from the model (greedy for temperature 0).");
}
