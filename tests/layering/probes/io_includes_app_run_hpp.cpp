// Layering probe: a file of the io library that includes "app/run.hpp" must not compile
// (tests/CMakeLists.txt, layering_refused_*).
#include "app/run.hpp"
