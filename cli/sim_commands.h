// The simulator's commands: simulate, check and accuracy. Each Add* registers a subcommand and
// its flags; its runner executes it after parsing (returns the exit code).
#ifndef DSPLAN_CLI_SIM_COMMANDS_H_
#define DSPLAN_CLI_SIM_COMMANDS_H_

#include <CLI/CLI.hpp>

#include "cli/command.h"

namespace dsplan {

DeclaredCommand AddSimulateCommand(CLI::App& app);
DeclaredCommand AddCheckCommand(CLI::App& app);
DeclaredCommand AddAccuracyCommand(CLI::App& app);

}  // namespace dsplan

#endif  // DSPLAN_CLI_SIM_COMMANDS_H_
