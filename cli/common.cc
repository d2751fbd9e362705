#include "cli/common.h"

#include <fmt/format.h>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"

namespace dsplan {

int Fail(const Status& s) {
  fmt::print(stderr, "dsplan: error: {}\n", s.message());
  return FailExitCode(s);
}

int FailExitCode(const Status& s) { return s.code() == Status::Code::kInternal ? 1 : 2; }

std::string DefaultHardwareName() {
  auto names = ListHardwareProfiles(DataDir());
  if (names.ok()) {
    for (const std::string& n : *names) {
      if (n == "h200-measured") return n;
    }
  }
  return "h200-sxm";
}

Lengths ResolveLengths(const ModelSpec& spec, std::optional<int64_t> seq_len,
                       std::optional<int64_t> target_len) {
  Lengths l;
  if (seq_len) {
    l.seq_len = *seq_len;
  } else if (spec.family == Family::kT5 || spec.family == Family::kBert) {
    l.seq_len = 512;
  } else {
    l.seq_len = 1024;
    if (spec.max_positions > 0 && spec.max_positions < l.seq_len &&
        (spec.family == Family::kGpt2 || spec.family == Family::kOpt)) {
      l.seq_len = spec.max_positions;
    }
  }
  l.target_len = target_len ? *target_len : (spec.encoder_decoder() ? 128 : 0);
  return l;
}

}  // namespace dsplan
