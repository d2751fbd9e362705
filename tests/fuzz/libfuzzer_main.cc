// libFuzzer entry of one target, chosen at compile time by DSPLAN_FUZZ_TARGET (a function of
// tests/fuzz/fuzz_targets.h). Built by scripts/fuzz.sh with clang -fsanitize=fuzzer,address,undefined.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return dsplan::fuzz::DSPLAN_FUZZ_TARGET(data, size);
}
