// The simulator's commands: simulate, check and accuracy. Each Add* registers a subcommand and
// its flags; the matching Run* executes it after parsing (returns the exit code).
#ifndef DSPLAN_CLI_SIM_COMMANDS_H_
#define DSPLAN_CLI_SIM_COMMANDS_H_

#include <CLI/CLI.hpp>

namespace dsplan {

CLI::App* AddSimulateCommand(CLI::App& app);
int RunSimulateCommand();
CLI::App* AddCheckCommand(CLI::App& app);
int RunCheckCommand();
CLI::App* AddAccuracyCommand(CLI::App& app);
int RunAccuracyCommand();

}  // namespace dsplan

#endif  // DSPLAN_CLI_SIM_COMMANDS_H_
