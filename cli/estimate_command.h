// dsplan estimate: model-state memory per ZeRO stage and offload option, three ways side by
// side: the ZeRO paper's accounting, DeepSpeed's own estimator functions
// (simulator/estimator.h) and, for a model, dsplan's full predicted peak (simulator/simulate.h)
// for a default configuration (bf16, AdamW, micro-batch 1, DeepSpeed's code defaults).
//
//   dsplan estimate --model M --gpus G [--nodes K] [--hardware H] [--json]
//   dsplan estimate --params N --gpus G [--nodes K] [--largest-layer-params L] [--json]
//
// (Also declared in cli/sim_commands.h, which lists every simulator command.)
#ifndef DSPLAN_CLI_ESTIMATE_COMMAND_H_
#define DSPLAN_CLI_ESTIMATE_COMMAND_H_

#include <CLI/CLI.hpp>

#include "cli/command.h"

namespace dsplan {

/// Registers the subcommand and its flags on |app|; its runner returns the exit code (0, or 2
/// for bad input with a one-line message).
DeclaredCommand AddEstimateCommand(CLI::App& app);

}  // namespace dsplan

#endif  // DSPLAN_CLI_ESTIMATE_COMMAND_H_
