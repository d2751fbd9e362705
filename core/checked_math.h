// Overflow-checked integer arithmetic for sizes (elements, bytes, FLOPs counts).
#ifndef DSPLAN_CORE_CHECKED_MATH_H_
#define DSPLAN_CORE_CHECKED_MATH_H_

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace dsplan {

/// a * b, or nullopt on int64 overflow.
inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// a + b, or nullopt on int64 overflow.
inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// Product of all factors, or nullopt on overflow.
inline std::optional<int64_t> CheckedProduct(std::initializer_list<int64_t> factors) {
  int64_t r = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(r, f, &r)) return std::nullopt;
  }
  return r;
}

}  // namespace dsplan

#endif  // DSPLAN_CORE_CHECKED_MATH_H_
