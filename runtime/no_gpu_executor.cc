// The executor of a build without CUDA: says how to get the real one.
#include "runtime/executor.h"

namespace dsplan {

bool GpuExecutorBuilt() { return false; }

Result<Execution> ExecuteOnGpu(const StepGraph&, const Workload&, const Plan&,
                               const ExecuteOptions&) {
  return Status::Unsupported(
      "this dsplan was built without CUDA: install the CUDA toolkit (nvcc) and rebuild with "
      "scripts/setup.sh; dsplan simulate predicts without a GPU");
}

}  // namespace dsplan
