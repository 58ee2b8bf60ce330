// Input arrays handed over by a host program (Python's rcsim.simulate(x0=..., weights=...)) by
// name, in place of the files of weights.file and init.file: the same requirements and the same
// shape checks (kernel/model/weights.hpp), with messages that name the array instead of a file.
#pragma once

#include <map>
#include <string>

#include "kernel/model/model_spec.hpp"
#include "kernel/model/weights.hpp"

namespace rcsim {

// The InputArrays of `c` from `given` (dataset names as in the files: X0, W_Q, W_K, W_V, W_O,
// W_in, b_in, W_out, b_out, norm_attn_gain, ...). UsageError, naming the array and what is
// allowed, for an array the configuration needs but that is not given, one it does not use, a
// wrong shape or a non-finite value. `source` names the arrays in messages.
InputArrays input_arrays_from(const ModelSpec& c, std::map<std::string, NdArray> given, const std::string& source);

}  // namespace rcsim
