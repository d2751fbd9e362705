// The GPU executor of a build without CUDA: not available, and Run says how to get the real one.
#include "runtime/executor.h"

namespace dsplan {
namespace {

class NoGpuExecutor final : public Executor {
 public:
  const char* name() const override { return "none"; }
  bool available() const override { return false; }
  Result<Execution> Run(const StepGraph&, const Workload&, const Plan&,
                        const ExecuteOptions&) override {
    return Status::Unsupported(
        "this dsplan was built without CUDA: install the CUDA toolkit (nvcc) and rebuild with "
        "scripts/setup.sh; dsplan simulate predicts without a GPU");
  }
};

}  // namespace

std::unique_ptr<Executor> MakeGpuExecutor() { return std::make_unique<NoGpuExecutor>(); }

}  // namespace dsplan
