// `dsplan profile`: measures this machine and writes a hardware profile (runtime/profiler).
#ifndef DSPLAN_CLI_PROFILE_COMMAND_H_
#define DSPLAN_CLI_PROFILE_COMMAND_H_

#include <CLI/CLI.hpp>

#include "cli/command.h"

namespace dsplan {

/// Adds the `profile` subcommand to |app|. Its runner returns the exit code: 0 done (notes may
/// say what was not measured), 2 bad input (unwritable --out, unknown --base or --only
/// section), 1 internal.
DeclaredCommand AddProfileCommand(CLI::App& app);

}  // namespace dsplan

#endif  // DSPLAN_CLI_PROFILE_COMMAND_H_
