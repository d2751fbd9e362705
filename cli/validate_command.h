// dsplan validate: runs a ds_config.json's training step on this machine's GPU(s) with the
// runtime (runtime/executor.h) and compares with the simulator's prediction for the same graph.
#ifndef DSPLAN_CLI_VALIDATE_COMMAND_H_
#define DSPLAN_CLI_VALIDATE_COMMAND_H_

#include <CLI/CLI.hpp>

#include "cli/command.h"

namespace dsplan {

/// Registers the subcommand and its flags on |app|; its runner returns the exit code (0 pass,
/// 4 fail, 2 bad input).
DeclaredCommand AddValidateCommand(CLI::App& app);

}  // namespace dsplan

#endif  // DSPLAN_CLI_VALIDATE_COMMAND_H_
