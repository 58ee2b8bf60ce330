// Layering probe: a file of the kernel library that includes "io/hdf5_file.hpp" must not compile
// (tests/CMakeLists.txt, layering_refused_*).
#include "io/hdf5_file.hpp"
