// `dsplan profile`: measures this machine and writes a hardware profile (runtime/profiler).
#ifndef DSPLAN_CLI_PROFILE_COMMAND_H_
#define DSPLAN_CLI_PROFILE_COMMAND_H_

#include <CLI/CLI.hpp>

namespace dsplan {

/// Adds the `profile` subcommand to |app| and returns it; its flags are kept inside this module.
CLI::App* AddProfileCommand(CLI::App& app);
/// Runs the subcommand after parsing. Returns the exit code: 0 done (notes may say what was not
/// measured), 2 bad input (unwritable --out, unknown --base or --only section), 1 internal.
int RunProfileCommand();

}  // namespace dsplan

#endif  // DSPLAN_CLI_PROFILE_COMMAND_H_
