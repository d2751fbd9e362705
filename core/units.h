// Units and their printing. Memory is printed in binary units (MiB = 2^20 B, GiB = 2^30 B);
// bandwidth in decimal GB/s (1e9 B/s) as nccl-tests does; FLOPs in decimal (TFLOP = 1e12).
// Numbers carry their unit in their name (`_bytes`, `_flops`, `_s`) throughout dsplan.
#ifndef DSPLAN_CORE_UNITS_H_
#define DSPLAN_CORE_UNITS_H_

#include <cstdint>
#include <string>

#include "core/status.h"

namespace dsplan {

inline constexpr int64_t kKiB = int64_t{1} << 10;
inline constexpr int64_t kMiB = int64_t{1} << 20;
inline constexpr int64_t kGiB = int64_t{1} << 30;

/// "1.50 GiB", "512.0 MiB", "12 B": binary units, three significant digits.
std::string FormatBytes(double bytes);
/// "1.23 TFLOP", "456 GFLOP": decimal units.
std::string FormatFlops(double flops);
/// "6.74 B", "124.4 M", "60.5 M": a parameter count in short form.
std::string FormatCount(double count);

/// Parses a size with an optional unit: "512GiB", "1.5TB", "80 GB", "4096", "2e9".
/// Binary units (KiB, MiB, GiB, TiB) are powers of 2; decimal (KB, MB, GB, TB) powers of 10;
/// no unit means bytes. Errors name |what| (e.g. "--host-memory") and the offending text.
Result<int64_t> ParseSize(const std::string& text, const std::string& what);

}  // namespace dsplan

#endif  // DSPLAN_CORE_UNITS_H_
