// The copy task and step timing without CUDA: this build found no CUDA toolkit, so there is no
// trainer to run. Both entry points say how to get one.
#include "runtime/reference_trainers/copy_task.h"

namespace dsplan {
namespace {

Status NoCuda() {
  return Status::Unsupported(
      "this dsplan was built without CUDA, so it has no GPU trainer: install the CUDA toolkit "
      "(nvcc and cuBLASLt), reconfigure with -DDSPLAN_WITH_CUDA=ON and rebuild");
}

}  // namespace

Result<CopyTaskReport> RunCopyTask(const CopyTaskOptions&) { return NoCuda(); }

Result<GptStepTiming> TimeGptStep(const ModelSpec&, int, int, int, int) { return NoCuda(); }

}  // namespace dsplan
