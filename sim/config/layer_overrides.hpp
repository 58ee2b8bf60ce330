// model.layer_overrides = FROM-TO:key=value[,key=value...]; ...: the settings of block ranges
// (docs/science/gradients.md), each range read as the whole configuration with its keys replaced.
#pragma once

#include "config/config.hpp"
#include "config/keys.hpp"

namespace rcsim {

// Appends c.layer_overrides from given[model.layer_overrides], each range's configuration read by
// `read_keys` (config.cpp's reader of every key, so that each value has its own key's checks).
// UsageError naming the entry for a malformed, overlapping or disallowed one.
void read_layer_overrides(const KeyValues& given, Config& c, Config (*read_keys)(KeyValues&));

}  // namespace rcsim
