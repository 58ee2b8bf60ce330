// Layering probe: a file of the geometry library that includes "io/run_file.hpp" must not compile
// (tests/CMakeLists.txt, layering_refused_*).
#include "io/run_file.hpp"
