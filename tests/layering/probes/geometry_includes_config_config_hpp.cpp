// Layering probe: a file of the geometry library that includes "config/config.hpp" must not compile
// (tests/CMakeLists.txt, layering_refused_*).
#include "config/config.hpp"
