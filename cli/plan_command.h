// The main job: `dsplan --model M --gpus G [pins...]` ranks DeepSpeed plans, explains the
// rejections and writes the chosen ds_config.json.
#ifndef DSPLAN_CLI_PLAN_COMMAND_H_
#define DSPLAN_CLI_PLAN_COMMAND_H_

#include <CLI/CLI.hpp>

#include "cli/command.h"

namespace dsplan {

/// Registers the planner's flags on the top-level |app|; its runner runs the planner with the
/// parsed flags (returns the exit code).
DeclaredCommand AddPlanFlags(CLI::App& app);

}  // namespace dsplan

#endif  // DSPLAN_CLI_PLAN_COMMAND_H_
