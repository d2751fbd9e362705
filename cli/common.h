// Helpers shared by the dsplan commands.
#ifndef DSPLAN_CLI_COMMON_H_
#define DSPLAN_CLI_COMMON_H_

#include <cstdint>
#include <optional>
#include <string>

#include "core/model_spec.h"
#include "core/status.h"

// Set by cli/CMakeLists.txt for every source of the dsplan binary; fallbacks for other builds.
#ifndef DSPLAN_VERSION
#define DSPLAN_VERSION "0.0.0"
#endif
#ifndef DSPLAN_GIT_HASH
#define DSPLAN_GIT_HASH "unknown"
#endif

namespace dsplan {

/// Prints "dsplan: error: <message>" and returns the exit code: 1 for internal errors, else 2.
int Fail(const Status& s);
/// The exit code Fail returns for |s|, without printing (ranks other than the one that reports).
int FailExitCode(const Status& s);

/// The default hardware profile: h200-measured when profiles/ has it, else h200-sxm.
std::string DefaultHardwareName();

struct Lengths {
  int64_t seq_len = 0;
  int64_t target_len = 0;
};
/// Sequence lengths from the flags, or the defaults: 512 (+128 decoder tokens) for T5 and BERT,
/// else 1024 capped at a learned position table (GPT-2, OPT).
Lengths ResolveLengths(const ModelSpec& spec, std::optional<int64_t> seq_len,
                       std::optional<int64_t> target_len);

}  // namespace dsplan

#endif  // DSPLAN_CLI_COMMON_H_
