// The `deepspeed` launch command and hostfile for a plan (deepspeed.md §7.3:
// deepspeed/launcher/runner.py), and DeepSpeed's hostfile parser for users who bring their own.
//
// Thread safety: pure functions (ParseHostfileFile reads one file).
#ifndef DSPLAN_PLANNER_LAUNCHER_H_
#define DSPLAN_PLANNER_LAUNCHER_H_

#include <string>
#include <string_view>
#include <vector>

#include "core/plan.h"
#include "core/status.h"

namespace dsplan {

/// One hostfile line: `name slots=N`.
struct HostSlots {
  std::string host;
  int slots = 0;

  bool operator==(const HostSlots&) const = default;
};

struct LaunchSpec {
  int nodes = 1;
  int gpus_per_node = 1;
  /// Host names, one per node. Empty: the hostfile uses placeholders node1..nodeK and says so.
  std::vector<std::string> hosts;
  std::string script = "train.py";
  /// Arguments after the script, before `--deepspeed <config>`.
  std::vector<std::string> script_args;
  std::string ds_config_path = "ds_config.json";
  std::string hostfile_path = "hostfile";
};

/// The LaunchSpec for |plan|'s cluster, with |hosts| (may be empty).
LaunchSpec LaunchSpecForPlan(const Plan& plan, std::vector<std::string> hosts = {});

/// `deepspeed --num_gpus G train.py --deepspeed ds_config.json` on one node;
/// `deepspeed --hostfile hostfile --num_nodes K --num_gpus G train.py ...` on several.
/// Arguments containing shell metacharacters are single-quoted.
std::string LaunchCommand(const LaunchSpec& spec);

/// The hostfile text: one `host slots=G` line per node. With placeholder names the text starts
/// with comment lines saying to replace them (DeepSpeed ignores `#` lines). Empty for one node.
std::string HostfileText(const LaunchSpec& spec);

/// True when |spec| has no real host names (the hostfile holds placeholders).
bool UsesPlaceholderHosts(const LaunchSpec& spec);

/// The HF Trainer arguments that make an "auto" config resolve to |plan|:
/// --per_device_train_batch_size, --gradient_accumulation_steps, --bf16/--fp16, --max_grad_norm.
std::vector<std::string> HfTrainerArgs(const Plan& plan);

/// DeepSpeed's _parse_hostfile: lines stripped; blank and `#` lines skipped; each other line must
/// match `^(\S+)\s+slots=(\d+)` (text after the match is ignored, as re.search does); a host
/// given twice, a line that does not match, or no hosts at all is an error naming the line.
Result<std::vector<HostSlots>> ParseHostfile(std::string_view text);

/// Reads |path| and parses it; errors start with the path.
Result<std::vector<HostSlots>> ParseHostfileFile(const std::string& path);

}  // namespace dsplan

#endif  // DSPLAN_PLANNER_LAUNCHER_H_
