// Helpers shared by the dsplan commands.
#ifndef DSPLAN_CLI_COMMON_H_
#define DSPLAN_CLI_COMMON_H_

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "core/model_spec.h"
#include "core/plan.h"
#include "core/hardware_profile.h"
#include "core/status.h"

// Set by cli/CMakeLists.txt for every source of the dsplan binary (the commit through a header
// generated at build time); fallbacks for other builds.
#ifndef DSPLAN_VERSION
#define DSPLAN_VERSION "0.0.0"
#endif
#ifdef DSPLAN_HAVE_GIT_HASH_H
#include "dsplan_git_hash.h"
#endif
#ifndef DSPLAN_GIT_HASH
#define DSPLAN_GIT_HASH "unknown"
#endif

namespace dsplan {

/// Prints "dsplan: error: <message>" and returns the exit code: 1 for internal errors, else 2.
int Fail(const Status& s);
/// The exit code Fail returns for |s|, without printing (ranks other than the one that reports).
int FailExitCode(const Status& s);

/// A CLI11 parse error as dsplan's one line (without the "dsplan: error: " prefix): the flag,
/// the value as given (quoted and cut) and what would be valid; stray arguments in the order
/// given. |argv| is the command line, for that order.
std::string CliErrorMessage(const CLI::ParseError& e, const CLI::App& app, int argc,
                            const char* const* argv);

/// Flag checks shared by the commands; each returns InvalidArgument naming the flag and value.
/// A finite number in (lo, hi] (lo_open) or [lo, hi].
Status CheckNumberFlag(const char* flag, double v, double lo, double hi, bool lo_open);
/// An integer in [lo, hi].
Status CheckIntFlag(const char* flag, int64_t v, int64_t lo, int64_t hi);
/// The integer count flags (--gpus, --nodes, --micro-batch, --grad-accum, --global-batch) take
/// their value through this transform, added with CLI::Option::transform. CLI11 reads integers
/// with strtoll base 0, so "1e6" would be refused and "010" read as octal 8. Here a decimal
/// integer with leading zeros ("010") becomes "10", and a number in scientific notation ("1e6",
/// "2.5e3") becomes its decimal digits when it is an exact integer in [lo, hi]; one that is not
/// an integer or lies outside [lo, hi] is refused with one line naming |flag| and the valid
/// range. Anything else passes unchanged to CLI11's own conversion and range checks.
CLI::Validator CountFlag(const std::string& flag, int64_t lo, int64_t hi);

/// After parsing: an option that takes a value and was given an empty one (`--hardware ''`,
/// often an unset shell variable in quotes) is an error naming it, where it would otherwise read
/// as not given and fall back to its default. Checks |app| and the subcommand that parsed.
Status CheckNoEmptyValues(const CLI::App& app);
/// Adds --gpus (GPUs per node) and --nodes to |cmd|, both positive counts with their defaults
/// shown in --help. Returns the --nodes option (to ask whether it was given).
CLI::Option* AddGpusAndNodesFlags(CLI::App* cmd, int& gpus, int& nodes);

/// GPUs per node x nodes: both positive, and the product at most kMaxWorldSize.
Status CheckCluster(int64_t gpus_per_node, int64_t nodes);
// kMaxWorldSize: core/plan.h.
/// --gpus is GPUs per node. When it exceeds the profile's |profile_gpus_per_node|: without an
/// explicit --nodes and as a whole number of nodes, it becomes that many nodes (rewriting
/// |gpus| and |nodes|); otherwise InvalidArgument saying what to give.
Status SplitGpusIntoNodes(int profile_gpus_per_node, const std::string& profile_name,
                          bool nodes_given, int* gpus, int* nodes);
/// Host names for a hostfile: letters, digits, '.', '-', '_' and ':' only, 1-253 bytes.
Status CheckHostName(const std::string& host);

/// The longest --seq-len / --target-len dsplan accepts (16 Mi tokens).
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 24;
/// --seq-len and --target-len when given: integers from 1 to kMaxSeqLen.
Status CheckLengthFlags(std::optional<int64_t> seq_len, std::optional<int64_t> target_len);

/// The default hardware profile: h200-measured when profiles/ has it, else h200-sxm.
std::string DefaultHardwareName();

/// What dsplan says about the machine it runs on against the profile it plans with
/// (core/local_machine.h); empty on machines without an NVIDIA driver.
struct MachineAdvice {
  /// When neither --hardware nor --node was given and this machine's GPU is not the one the
  /// default profile describes: one line naming a shipped profile of this GPU.
  std::optional<std::string> gpu;
  /// When this machine's GPU is the profile's (the user plans for a machine like this one), no
  /// --node was given, and its host RAM or cores differ from the profile's (those not set by
  /// --host-memory / --host-cores): one line naming the flags.
  std::optional<std::string> host;
  /// Both lines there are, GPU first.
  std::vector<std::string> Lines() const;
};
MachineAdvice LocalMachineAdvice(const std::string& hardware, const std::string& node,
                                 bool host_memory_given, bool host_cores_given,
                                 const HardwareProfile& profile);

/// The machine a command plans for: --hardware (or the default), built into --node when given
/// (core/hardware_profile.h NodeProfile), with --host-cores (-1: not given) replacing the node's cores.
Result<HardwareProfile> LoadMachine(const std::string& hardware, const std::string& node,
                                    int host_cores);

/// The run shape's lengths from --seq-len and --target-len, the same for every command: the
/// lengths given are checked (CheckLengthFlags), then the one length rule, ResolveRunLengths
/// (simulator/workload.h), sets shape->seq_len and shape->target_len (a given length wins, else
/// the model's default). Nothing else in |shape| changes.
Status ResolveLengthFlags(const ModelSpec& spec, std::optional<int64_t> seq_len,
                          std::optional<int64_t> target_len, RunShape* shape);

}  // namespace dsplan

#endif  // DSPLAN_CLI_COMMON_H_
