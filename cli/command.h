// A dsplan command as the command table (cli/main.cc) holds it: the options are declared on a
// CLI::App and bound into a value the command owns, and the command itself is a function of
// that value, called once the line has parsed. No command keeps its options at file scope, so
// every DsplanMain call (the fuzz targets loop over it) starts from the defaults.
#ifndef DSPLAN_CLI_COMMAND_H_
#define DSPLAN_CLI_COMMAND_H_

#include <functional>

#include <CLI/CLI.hpp>

namespace dsplan {

/// A command declared on the command line: |app| is its subcommand (the top-level app for the
/// main job), |run| calls the command with the parsed option values and returns the exit code.
struct DeclaredCommand {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

}  // namespace dsplan

#endif  // DSPLAN_CLI_COMMAND_H_
