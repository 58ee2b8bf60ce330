// The commands of the command line other than the geometry commands (app/geometry_command.hpp):
// each is defined in its own file (cmd_NAME.cpp) with its `rcsim NAME --help` text and its
// options; the table of commands (command_table.hpp) lists them.
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
int cmd_equilibria(const Invocation& inv, const std::vector<std::string>& args);
std::string equilibria_help();
std::vector<KeyDecl> equilibria_options();  // --tol, --probes, ... (besides the keys)

// rcsim analyze (cmd_analyze.cpp).
int cmd_analyze(const Invocation& inv);
std::string analyze_help();
std::vector<KeyDecl> analyze_options();  // --threshold, --window, --no-write

// rcsim generate (cmd_generate.cpp): ids from a llama2.c checkpoint; its stack's measures.
int cmd_generate(const Invocation& inv, const std::vector<std::string>& args);
std::string generate_help();
std::vector<KeyDecl> generate_options();  // --ids, --measure, --steps, ...

}  // namespace rcsim
