// dsplan: the command-line front end. The only place that turns a Status into an exit code:
// 0 success, 2 bad input (unknown model, malformed file, impossible value), 1 internal error.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/dsplan_main.h"
#include "cli/estimate_command.h"
#include "cli/gui_command.h"
#include "cli/plan_command.h"
#include "cli/profile_command.h"
#include "cli/sim_commands.h"
#include "cli/validate_command.h"
#include "core/model_catalog.h"
#include "core/status.h"
#include "core/text.h"
#include "core/units.h"
#include "core/hardware_profile.h"
#include "simulator/cost_model.h"
#include "simulator/layer_times.h"
#include "simulator/workload.h"
#include "simulator/workload_report.h"


namespace dsplan {
namespace {

// Options that describe one training micro-step's shape.
struct WorkloadFlags {
  int64_t micro_batch = 1;
  std::optional<int64_t> seq_len;
  std::optional<int64_t> target_len;
  std::string precision = "bf16";
  std::string attention = "auto";
  bool gradient_checkpointing = false;

  void Add(CLI::App* app) {
    app->add_option("--micro-batch,--mb", micro_batch, "Samples per GPU per micro-step")
        ->capture_default_str()
        ->transform(CountFlag("--micro-batch", 1, 1 << 20));
    app->add_option("--seq-len", seq_len,
                    "Tokens per sample (T5: encoder length). Default: 512 for T5 and BERT, "
                    "else 1024 (capped at a learned position table)");
    app->add_option("--target-len", target_len, "T5 decoder length (default 128)");
    app->add_option("--precision", precision, "bf16, fp16 or fp32")->capture_default_str();
    app->add_option("--attention", attention,
                    "eager, sdpa, or auto (what transformers picks by default)")
        ->capture_default_str();
    app->add_flag("--gradient-checkpointing", gradient_checkpointing,
                  "Activation checkpointing of every block (HF, use_reentrant=False)");
  }

  Result<RunShape> Resolve(const ModelSpec& spec) const {
    RunShape o;
    o.micro_batch = micro_batch;
    DSPLAN_RETURN_IF_ERROR(ResolveLengthFlags(spec, seq_len, target_len, &o));
    DSPLAN_ASSIGN_OR_RETURN(o.precision, ParsePrecision(precision));
    DSPLAN_ASSIGN_OR_RETURN(o.attention, ParseAttentionImpl(attention));
    o.gradient_checkpointing = gradient_checkpointing;
    return o;
  }
};

int RunModels(bool json) {
  auto entries = ListCatalog(DataDir());
  if (!entries.ok()) return Fail(entries.status());
  nlohmann::json out = nlohmann::json::array();
  if (!json) {
    fmt::print("{:<20} {:<10} {:>16} {:>9}  {}\n", "name", "type", "parameters", "", "HF id");
  }
  for (const CatalogEntry& e : *entries) {
    auto spec = LoadModel(e.name, DataDir());
    if (!spec.ok()) return Fail(spec.status());
    auto params = CountParameters(*spec);
    if (!params.ok()) return Fail(params.status().WithPrefix(e.path));
    if (json) {
      out.push_back({{"name", e.name},
                     {"model_type", spec->model_type},
                     {"class", ModelClassName(spec->family)},
                     {"params", *params},
                     {"hf_id", e.hf_id},
                     {"description", e.description}});
    } else {
      fmt::print("{:<20} {:<10} {:>16} {:>9}  {}\n", e.name, spec->model_type, *params,
                 FormatCount(static_cast<double>(*params)), e.hf_id);
    }
  }
  if (json) fmt::print("{}\n", JsonText(out));
  return 0;
}

// dsplan model's options.
struct ModelFlags {
  std::string model;
  bool json = false, all_layers = false, tensors = false, times = false;
  std::string hardware;  // with --times; empty: DefaultHardwareName()
  WorkloadFlags workload;
};

int RunModel(const ModelFlags& f) {
  const std::string& model = f.model;
  const WorkloadFlags& flags = f.workload;
  const bool json = f.json, all_layers = f.all_layers, tensors = f.tensors;
  auto spec = LoadModel(model, DataDir());
  if (!spec.ok()) return Fail(spec.status());
  auto opts = flags.Resolve(*spec);
  if (!opts.ok()) return Fail(opts.status());
  auto w = BuildWorkload(*spec, *opts);
  if (!w.ok()) return Fail(w.status());
  std::optional<HardwareProfile> hw;
  if (f.times) {
    auto p = FindHardwareProfile(f.hardware.empty() ? DefaultHardwareName() : f.hardware,
                                 DataDir());
    if (!p.ok()) return Fail(p.status());
    hw = std::move(*p);
  } else if (!f.hardware.empty()) {
    return Fail(Status::InvalidArgument("--hardware is read only with --times"));
  }
  // The PyTorch stack's prices of each op (CostModel), as `dsplan simulate` uses them.
  auto times = [&] {
    return PriceLayers(*w, CostModel(*hw, opts->precision), all_layers);
  };
  if (json) {
    nlohmann::json j = WorkloadToJson(*w, tensors);
    if (hw) {
      j["times"] = {{"hardware", hw->name}, {"layers", LayerTimesJson(times())}};
    }
    j["schema"] = "dsplan/model";
    j["schema_version"] = 1;
    j["dsplan_version"] = DSPLAN_VERSION;
    fmt::print("{}\n", JsonText(j));
    return 0;
  }
  fmt::print("{}", ModelSummary(*spec, w->params));
  std::string shape =
      spec->encoder_decoder()
          ? fmt::format("micro-batch {}, source {} + target {} tokens", opts->micro_batch,
                        opts->seq_len, opts->target_len)
          : fmt::format("micro-batch {}, sequence {}", opts->micro_batch, opts->seq_len);
  fmt::print("workload: {}, {}, attention {}, checkpointing {}\n\n", shape,
             PrecisionName(opts->precision), AttentionImplName(w->attention),
             opts->gradient_checkpointing ? "on" : "off");
  fmt::print("{}", WorkloadTable(*w, all_layers));
  if (hw) {
    fmt::print("\npredicted kernel and host time per layer on {} (PyTorch eager + DeepSpeed "
               "stack; host time is the family's measured block where the stack costs hold it, "
               "else per op)\n\n{}",
               hw->name, LayerTimesText(times()));
  }
  return 0;
}

DeclaredCommand AddModelsCommand(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("models", "List the model catalog with parameter counts");
  cmd->add_flag("--json", *json, "Machine-readable output");
  return {cmd, [json] { return RunModels(*json); }};
}

DeclaredCommand AddModelCommand(CLI::App& app) {
  auto flags = std::make_shared<ModelFlags>();
  ModelFlags& f = *flags;
  CLI::App* cmd =
      app.add_subcommand("model", "Per-layer parameters, FLOPs and saved activations of a model");
  cmd->add_option("model", f.model, "Catalog name or path to a HF config.json")->required();
  cmd->add_flag("--json", f.json, "Machine-readable output");
  cmd->add_flag("--all-layers", f.all_layers, "One row per block instead of folding repeats");
  cmd->add_flag("--tensors", f.tensors, "With --json: include the full tensor table");
  cmd->add_flag("--times", f.times,
                "Also each op's predicted forward and backward kernel time and each layer's "
                "host time (to set beside a kernel profile)");
  cmd->add_option("--hardware", f.hardware,
                  "With --times: hardware profile name or YAML path (default: h200-measured "
                  "when installed)");
  f.workload.Add(cmd);
  return {cmd, [flags] { return RunModel(*flags); }};
}

// The subcommands, in the order --help lists them. Each declares its options on its own
// subcommand, bound into a value its runner owns.
constexpr DeclaredCommand (*kSubcommands[])(CLI::App&) = {
    AddModelsCommand,   AddModelCommand,    AddProfileCommand,  AddAccuracyCommand,
    AddSimulateCommand, AddCheckCommand,    AddEstimateCommand, AddValidateCommand,
    AddGuiCommand,
};

}  // namespace

int DsplanMain(int argc, char** argv, const DsplanMainOptions& options) {
  CLI::App app{"dsplan: which DeepSpeed ZeRO configuration fits on your GPUs, and which is fastest"};
  app.set_version_flag("--version", std::string("dsplan ") + DSPLAN_VERSION + " (" +
                                        DSPLAN_GIT_HASH + ")");
  app.require_subcommand(0, 1);

  // Main job: dsplan --model M --gpus G (the planner), whose options sit on the app itself.
  const DeclaredCommand plan = AddPlanFlags(app);
  std::vector<DeclaredCommand> subcommands;
  for (auto add : kSubcommands) subcommands.push_back(add(app));

  // A command line dsplan cannot run: one line, exit 2 (or handed to the caller that asked).
  auto refuse = [&options](const Status& s) {
    if (options.parse_error != nullptr) {
      *options.parse_error = s.message();
      return FailExitCode(s);
    }
    return Fail(s);
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return refuse(Status::InvalidArgument(CliErrorMessage(e, app, argc, argv)));
  }
  if (Status s = CheckNoEmptyValues(app); !s.ok()) return refuse(s);
  if (options.parse_only) return 0;

  // At most one subcommand parses (require_subcommand(0, 1)); none: the main job.
  const DeclaredCommand* chosen = &plan;
  for (const DeclaredCommand& c : subcommands) {
    if (*c.app) chosen = &c;
  }
  int rc = 0;
  try {
    rc = chosen->run();
  } catch (const std::system_error& e) {
    // fmt reports a failed write to stdout (full disk, closed pipe end) as a system_error.
    std::clearerr(stdout);
    return Fail(Status::IoError(
        fmt::format("writing the output failed: {}", e.code().message())));
  } catch (const std::bad_alloc&) {
    return Fail(Status::Internal("out of memory"));
  } catch (const std::exception& e) {
    return Fail(Status::Internal(fmt::format("unexpected error: {}", e.what())));
  }
  // Output still in stdio's buffer is written now: a full disk or closed stdout shows here.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    const int err = errno;
    return Fail(Status::IoError(fmt::format("writing the output failed: {}",
                                            err ? std::strerror(err) : "write error")));
  }
  return rc;
}

}  // namespace dsplan
