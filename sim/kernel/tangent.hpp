// The tangent projection moved to kernel/ops/tangent_projection.hpp (issue 34: one file per operation, forward next to adjoint and
// tangent); this header is kept so that its includers need no change.
#pragma once

#include "kernel/ops/tangent_projection.hpp"
