// The row normalisations moved to kernel/ops/normalization.hpp (issue 34: one file per operation, forward next to adjoint and
// tangent); this header is kept so that its includers need no change.
#pragma once

#include "kernel/ops/normalization.hpp"
