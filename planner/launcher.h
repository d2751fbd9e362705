// The `deepspeed` launch command and hostfile for a plan (docs/deepspeed-facts.md#launcher:
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

/// How the training script takes its DeepSpeed config.
enum class ScriptKind {
  /// The HF Trainer (TrainingArguments): `--deepspeed FILE` plus the Trainer arguments that
  /// must agree with the file (HfTrainerArgs).
  kHfTrainer,
  /// A plain DeepSpeed script using deepspeed.add_config_arguments(parser):
  /// `--deepspeed --deepspeed_config FILE`.
  kDeepSpeed,
};

struct LaunchSpec {
  ScriptKind kind = ScriptKind::kHfTrainer;
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
/// `deepspeed --hostfile hostfile --num_nodes K --num_gpus G train.py ...` on several. With
/// ScriptKind::kDeepSpeed the config is passed as `--deepspeed --deepspeed_config FILE`.
/// Arguments containing shell metacharacters are single-quoted.
std::string LaunchCommand(const LaunchSpec& spec);

/// The same job under torchrun: `torchrun --nproc_per_node G train.py ...` on one node; on
/// several, `torchrun --nnodes K --nproc_per_node G --rdzv_backend c10d --rdzv_endpoint
/// $MASTER_ADDR:29500 ...`, run once on every node.
std::string TorchrunCommand(const LaunchSpec& spec);

/// Under Slurm (several nodes): one torchrun per node through srun, the first node of the
/// allocation as the rendezvous host. Two lines (MASTER_ADDR, then srun). Empty for one node.
std::string SrunCommand(const LaunchSpec& spec);

/// The hostfile text: one `host slots=G` line per node. With placeholder names the text starts
/// with comment lines saying to replace them (DeepSpeed ignores `#` lines). Empty for one node.
std::string HostfileText(const LaunchSpec& spec);

/// True when |spec| has no real host names (the hostfile holds placeholders).
bool UsesPlaceholderHosts(const LaunchSpec& spec);

/// The HF Trainer arguments under which |plan|'s config (explicit or "auto") is accepted and
/// resolves to |plan|: --per_device_train_batch_size, --gradient_accumulation_steps,
/// --bf16/--fp16, --max_grad_norm, the optimizer's --learning_rate, --adam_beta1/2,
/// --adam_epsilon, --weight_decay and the scheduler's --warmup_steps when the plan sets them
/// (the Trainer raises when an explicit config value disagrees with its argument), and
/// --gradient_checkpointing.
std::vector<std::string> HfTrainerArgs(const Plan& plan);

/// DeepSpeed's _parse_hostfile: lines stripped; blank and `#` lines skipped; each other line must
/// match `^(\S+)\s+slots=(\d+)` (text after the match is ignored, as re.search does); a host
/// given twice, a line that does not match, or no hosts at all is an error naming the line.
Result<std::vector<HostSlots>> ParseHostfile(std::string_view text);

/// Reads |path| and parses it; errors start with the path.
Result<std::vector<HostSlots>> ParseHostfileFile(const std::string& path);

}  // namespace dsplan

#endif  // DSPLAN_PLANNER_LAUNCHER_H_
