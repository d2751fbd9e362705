// Prints dsplan's predicted forward and backward seconds of every op of a model's first block
// and of the layers outside the blocks, with the op's kind: the per-op view behind a block's
// predicted time, to set beside a kernel profile (tools/probes/step_kernels.py) when a block
// is predicted too fast or too slow. GPU compute only (no host time, no hooks).
//
// usage: op_costs MODEL MICRO_BATCH SEQ_LEN [PROFILE]   (run from the repository root)
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "simulator/cost_model.h"
#include "simulator/workload.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: op_costs MODEL MICRO_BATCH SEQ_LEN [PROFILE]\n";
    return 2;
  }
  const char* dir_env = std::getenv("DSPLAN_DATA_DIR");
  const std::string dir = dir_env ? dir_env : ".";
  auto spec = dsplan::LoadModel(argv[1], dir);
  if (!spec.ok()) {
    std::cerr << "op_costs: " << spec.status().message() << "\n";
    return 2;
  }
  auto profile = dsplan::FindHardwareProfile(argc > 4 ? argv[4] : "h200-measured", dir);
  if (!profile.ok()) {
    std::cerr << "op_costs: " << profile.status().message() << "\n";
    return 2;
  }
  dsplan::RunShape o;
  o.micro_batch = std::atoll(argv[2]);
  o.seq_len = std::atoll(argv[3]);
  if (o.micro_batch <= 0 || o.seq_len <= 0) {
    std::cerr << "op_costs: MICRO_BATCH and SEQ_LEN must be positive integers\n";
    return 2;
  }
  if (spec->family == dsplan::Family::kT5) o.target_len = 128;
  auto w = dsplan::BuildWorkload(*spec, o);
  if (!w.ok()) {
    std::cerr << "op_costs: " << w.status().message() << "\n";
    return 2;
  }
  const dsplan::CostModel cm(*profile, o.precision);
  bool block_done = false;
  std::printf("%-12s %-10s %10s %10s  %s\n", "layer", "kind", "fwd_ms", "bwd_ms", "op");
  for (const dsplan::Layer& l : w->layers) {
    const bool is_block = l.ops.size() > 4 && l.name.find_first_of("0123456789") != std::string::npos;
    if (is_block && block_done) continue;
    double f = 0, b = 0;
    for (const dsplan::Op& op : l.ops) {
      const double of = cm.OpForwardSeconds(op), ob = cm.OpBackwardSeconds(op);
      f += of;
      b += ob;
      std::printf("%-12.12s %-10s %10.4f %10.4f  %s\n", l.name.c_str(), dsplan::OpKindName(op.kind),
                  of * 1e3, ob * 1e3, op.name.c_str());
    }
    std::printf("%-12.12s %-10s %10.4f %10.4f  (layer total)\n", l.name.c_str(), "", f * 1e3, b * 1e3);
    if (is_block) block_done = true;
  }
  return 0;
}
