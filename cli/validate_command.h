// dsplan validate: runs a ds_config.json's training step on this machine's GPU(s) with the
// runtime (runtime/executor.h) and compares with the simulator's prediction for the same graph.
#ifndef DSPLAN_CLI_VALIDATE_COMMAND_H_
#define DSPLAN_CLI_VALIDATE_COMMAND_H_

#include <CLI/CLI.hpp>

namespace dsplan {

CLI::App* AddValidateCommand(CLI::App& app);
int RunValidateCommand();

}  // namespace dsplan

#endif  // DSPLAN_CLI_VALIDATE_COMMAND_H_
