// Layering probe, positive control: a file of the kernel includes the kernel (must compile).
#include "kernel/trial/simulation.hpp"
