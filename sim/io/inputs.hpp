// The kernel's inputs read from files: the custom mask of mask.file and the arrays of
// weights.file and init.file (the HDF5 side of the kernel's weight source, kernel/model/weights.hpp).
#pragma once

#include "kernel/model/mask.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/trial/simulation.hpp"
#include "kernel/model/weights.hpp"

namespace rcsim {

// The arrays `c` reads from weights.file and init.file (kernel input_requirements), each checked
// against the shapes it allows. UsageError naming the key, the file and the dataset.
InputArrays load_inputs(const ModelSpec& c);

// The mask `c` asks for; for mask.type = custom, dataset /mask [N, N] of mask.file (nonzero =
// attends), checked for self-loops.
MaskMatrix load_mask(const ModelSpec& c);

// The kernel's prepare() with the mask and the input arrays read from their files.
EngineSetup prepare(const ModelSpec& c);

}  // namespace rcsim
