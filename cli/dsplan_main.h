// The dsplan command line as a function, so that the fuzz targets (tests/fuzz) parse arguments
// exactly as the binary does.
#ifndef DSPLAN_CLI_DSPLAN_MAIN_H_
#define DSPLAN_CLI_DSPLAN_MAIN_H_

#include <string>

namespace dsplan {

struct DsplanMainOptions {
  /// Parse the arguments and stop: 0 when they parse, else the exit code of the parse error.
  bool parse_only = false;
  /// With parse_only: where the parse error's message goes instead of stderr.
  std::string* parse_error = nullptr;
};

/// Runs dsplan with |argv|; returns the exit code (docs/cli.md).
int DsplanMain(int argc, char** argv, const DsplanMainOptions& options = {});

}  // namespace dsplan

#endif  // DSPLAN_CLI_DSPLAN_MAIN_H_
