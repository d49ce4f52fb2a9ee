// RoPE's frequencies, shared by the CPU and CUDA kernels and by the engine's checks: the base
// inverse frequency theta^(-2i/head_dim) of pair i, and Llama 3.x's frequency scaling
// (Hugging Face rope_type "llama3", transformers' _compute_llama3_parameters): wavelengths
// shorter than original_max_position / high_freq_factor keep their frequency, those longer
// than original_max_position / low_freq_factor are divided by factor, and the band between
// interpolates smoothly. Header-only and host/device, so both backends compute the same thing.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define SATURN_ROPE_HD __host__ __device__
#else
#define SATURN_ROPE_HD
#endif

namespace saturn {

struct RopeParams {
  float theta = 10000.0f;
  // Llama 3.x scaling; llama3_factor 0: none (plain RoPE).
  float llama3_factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_max_position = 8192.0f;

  RopeParams() = default;
  // Plain RoPE with this base (implicit, so a bare theta passes where RopeParams is taken).
  RopeParams(float base) : theta(base) {}  // NOLINT(google-explicit-constructor)
  bool scaled() const { return llama3_factor > 0.0f; }
};

// Applies the Llama 3.x scaling to one base inverse frequency (identity when not scaled).
template <typename T>
SATURN_ROPE_HD inline T ScaleRopeInvFreq(const RopeParams& p, T inv_freq) {
  if (!(p.llama3_factor > 0.0f)) return inv_freq;
  const T kPi = static_cast<T>(3.14159265358979323846);
  const T wavelen = static_cast<T>(2) * kPi / inv_freq;
  const T old_len = static_cast<T>(p.original_max_position);
  const T low = static_cast<T>(p.low_freq_factor), high = static_cast<T>(p.high_freq_factor);
  const T factor = static_cast<T>(p.llama3_factor);
  if (wavelen < old_len / high) return inv_freq;              // high frequencies: unchanged
  if (wavelen > old_len / low) return inv_freq / factor;      // low frequencies: scaled
  const T smooth = (old_len / wavelen - low) / (high - low);  // the band between
  return (static_cast<T>(1) - smooth) * inv_freq / factor + smooth * inv_freq;
}

// The inverse frequency of pair i (0 <= i < head_dim / 2), scaling included, in double (host
// only; the CUDA kernel computes its f32 base itself and scales it with the function above).
inline double RopeInvFreq(const RopeParams& p, int i, int head_dim) {
  const double base = std::pow(static_cast<double>(p.theta), -2.0 * i / head_dim);
  return ScaleRopeInvFreq<double>(p, base);
}

}  // namespace saturn
