// The commands of the command line other than the geometry commands (cli_geometry.hpp): each
// is defined in its own file (cmd_NAME.cpp) with its `rcsim NAME --help` text.
#pragma once

#include <string>
#include <vector>

#include "cli/invocation.hpp"

namespace rcsim {

// rcsim run / rcsim sweep (cmd_run.cpp); `args` is the whole command line, recorded in the files.
int cmd_run(const Invocation& inv, const std::vector<std::string>& args);
std::string run_help();

// rcsim mask-info (cmd_mask_info.cpp).
int cmd_mask_info(const Invocation& inv);
std::string mask_info_help();

// rcsim equilibria (cmd_equilibria.cpp).
int cmd_equilibria(Invocation inv, const std::vector<std::string>& args);
std::string equilibria_help();

// rcsim analyze (cmd_analyze.cpp).
int cmd_analyze(const Invocation& inv);
std::string analyze_help();

// rcsim generate (cmd_generate.cpp): ids from a llama2.c checkpoint; its stack's measures.
int cmd_generate(const Invocation& inv, const std::vector<std::string>& args);
std::string generate_help();

}  // namespace rcsim
