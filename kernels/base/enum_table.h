// One value per enumerator of a dense enum (its enumerators 0, 1, ..., then kCount), kept in a
// constexpr array next to the enum instead of a switch per enum: the way ggml keeps
// GGML_OP_NAME[] beside enum ggml_op, with the count checked at compile time. EnumLookup is
// the one read of such a table: it refuses (at compile time) a table whose size is not the
// enum's kCount, and answers `fallback` for a value outside the enumerators (kCount itself,
// or a cast from a bad integer). Header-only and C++17 (nvcc compiles the CUDA sources that
// include kernels/tensor.h); no dependency, so every module may use it.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>

namespace saturn {

// How many enumerators E has before its kCount.
template <typename E>
constexpr size_t EnumCount() {
  static_assert(std::is_enum_v<E>, "EnumCount takes an enum type");
  return static_cast<size_t>(E::kCount);
}

// table[e], or `fallback` where e is not one of E's enumerators.
template <typename E, typename V, size_t N>
constexpr V EnumLookup(const std::array<V, N>& table, E e, V fallback) {
  static_assert(N == EnumCount<E>(), "the table needs one entry per enumerator, in order");
  using U = std::underlying_type_t<E>;
  const U i = static_cast<U>(e);
  if constexpr (std::is_signed_v<U>) {
    if (i < 0) return fallback;
  }
  return static_cast<size_t>(i) < N ? table[static_cast<size_t>(i)] : fallback;
}

}  // namespace saturn
