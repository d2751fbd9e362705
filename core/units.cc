#include "core/units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "core/text.h"

namespace dsplan {
namespace {

std::string ThreeDigits(double v, const char* unit) {
  double a = std::fabs(v);
  if (a >= 100) return fmt::format("{:.0f} {}", v, unit);
  if (a >= 10) return fmt::format("{:.1f} {}", v, unit);
  return fmt::format("{:.2f} {}", v, unit);
}

}  // namespace

std::string FormatBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f} B", v);
  return ThreeDigits(v, kUnits[u]);
}

std::string FormatFlops(double flops) {
  static const char* kUnits[] = {"FLOP", "KFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP"};
  int u = 0;
  double v = flops;
  while (std::fabs(v) >= 1000 && u < 6) {
    v /= 1000;
    ++u;
  }
  return ThreeDigits(v, kUnits[u]);
}

std::string FormatCount(double count) {
  if (count >= 1e9) return ThreeDigits(count / 1e9, "B");
  if (count >= 1e6) return ThreeDigits(count / 1e6, "M");
  if (count >= 1e3) return ThreeDigits(count / 1e3, "K");
  return fmt::format("{:.0f}", count);
}

Result<int64_t> ParseSize(const std::string& text, const std::string& what) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(fmt::format(
        "{} {} is not a size ({}); write bytes or a number with a unit, e.g. 512GiB, 1.5TB, "
        "80GB, 4096",
        what, Quote(text), why));
  };
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  const char* begin = text.c_str() + i;
  char* end = nullptr;
  double v = std::strtod(begin, &end);
  if (end == begin) return bad("no number");
  std::string unit(end);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back()))) unit.pop_back();
  std::string u;
  for (char c : unit) u += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 0;
  if (u.empty() || u == "B") mult = 1;
  else if (u == "KIB") mult = 1024.0;
  else if (u == "MIB") mult = 1024.0 * 1024;
  else if (u == "GIB") mult = 1024.0 * 1024 * 1024;
  else if (u == "TIB") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (u == "KB") mult = 1e3;
  else if (u == "MB") mult = 1e6;
  else if (u == "GB") mult = 1e9;
  else if (u == "TB") mult = 1e12;
  else return bad(fmt::format("unknown unit {}", Quote(unit)));
  if (!std::isfinite(v) || v < 0) return bad("must be a non-negative number");
  double bytes = v * mult;
  if (bytes > 9.0e18) return bad("too large");
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace dsplan
