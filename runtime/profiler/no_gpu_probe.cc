// MakeGpuProbe for a build without CUDA: a probe that has no device and says why.
#include "runtime/profiler/device_probe.h"

namespace dsplan {
namespace {

class NoGpuProbe : public DeviceProbe {
 public:
  int DeviceCount() override { return 0; }
  std::string UnavailableReason() override {
    return "this dsplan was built without the CUDA toolkit";
  }
  Result<GpuInfo> Info() override { return Fail(); }
  Result<int64_t> ContextBytes() override { return Fail(); }
  Result<Timing> Gemm(Precision, GemmLayout, int64_t, int64_t, int64_t, int64_t,
                      const Repeats&) override {
    return Fail();
  }
  Result<Timing> StreamLaunches(int64_t, int, const Repeats&) override { return Fail(); }
  Result<Timing> DeviceCopy(int64_t, const Repeats&) override { return Fail(); }
  Result<Timing> Elementwise(int64_t, const Repeats&) override { return Fail(); }
  Result<Timing> HostCopy(CopyKind, int64_t, const Repeats&) override { return Fail(); }
  Result<Timing> KernelLaunch(const Repeats&) override { return Fail(); }
  Result<double> PinnedAllocBytesPerS(int64_t) override { return Fail(); }
  Result<Timing> Collective(dsplan::Collective, int, int64_t, const Repeats&) override {
    return Fail();
  }

 private:
  static Status Fail() { return Status::Unsupported("no CUDA in this build"); }
};

}  // namespace

std::unique_ptr<DeviceProbe> MakeGpuProbe() { return std::make_unique<NoGpuProbe>(); }

}  // namespace dsplan
