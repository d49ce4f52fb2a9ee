// The arithmetic of the device sampler (kernels/cuda/sampling.cu), in one header that compiles
// for host and device, so that a host test can run the very code the kernel runs, in the
// kernel's order, and compare its choice with the CPU twin (kernels/cpu/sampling.cc).
//
// What it owns: the order key, the per-element work of every pass, the search that finds a
// token without sorting (SampleRowSearch), the block's thread partition and the order in
// which per-thread partial sums are combined (a xor butterfly within each warp, then warps
// in index order), plus EmulatedBlock, which replays that partition and order on the host.
// What it must never do: accumulate a probability, a CDF, the kept mass or u in float. The
// CPU twin does all of them in double; a float CDF moves the drawn token by one rank whenever
// u falls within a float ulp of a boundary (review 2026-12-01, finding 1).
//
// The search: the order (z desc, index asc) is total. "The first element in that order whose
// inclusive prefix sum reaches theta" is found by a search on z's order-preserving 32-bit key
// (the largest key T with sum_{key >= T} w >= theta, kProbes probes per pass), then a search
// on the index inside the tie group key == T. Each pass reads the row once.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/base/host_device.h"
#include "kernels/sampling_rng.h"

#if defined(__CUDACC__)
#define SATURN_SAMPLE_UNROLL _Pragma("unroll")
#else
#define SATURN_SAMPLE_UNROLL
#endif

namespace saturn::sample_search {

constexpr int kThreads = 512;  // threads per row; 15 double accumulators fit 128 registers
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kProbes = 15;  // a 16-ary search: 8 passes over 32-bit keys

// Order-preserving key of a float; -0.0 is keyed as +0.0, as the CPU's comparisons see them.
SATURN_HD uint32_t OrderKey(float f) {
  if (f == 0.0f) f = 0.0f;
#if defined(__CUDA_ARCH__)
  const uint32_t b = __float_as_uint(f);
#else
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
#endif
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// What a search sums over: the kept elements (those at or before the bound in (z desc,
// index asc) order), keyed by z, or, in tie mode, the kept elements whose z key equals `tie`,
// keyed by (n - 1 - index) so that a larger key is a lower index. The weight is 1 (counting)
// or p = exp(z - mx) / sum in double, recomputed per element as the CPU twin does.
struct RowView {
  const float* x;  // z = logits / temperature
  int n;
  bool ones;
  bool tie_mode;
  uint32_t tie;
  uint32_t bound_key;  // kept: key > bound_key, or key == bound_key and index <= bound_idx
  int bound_idx;
  double mx;
  double sum;
};

SATURN_HD bool Kept(const RowView& r, uint32_t key, int i) {
  return key > r.bound_key || (key == r.bound_key && i <= r.bound_idx);
}

// exp(z - mx) in double, exactly the CPU twin's expression (float z, double max).
SATURN_HD double ExpShifted(float z, double mx) { return exp(static_cast<double>(z) - mx); }

struct Probes {
  uint32_t key[kProbes];
};
struct ProbeAcc {
  double v[kProbes];
};

// One element's contribution to out[j] = sum of w over elements with key >= probes[j].
SATURN_HD void ProbeElement(const RowView& r, int i, const Probes& p, ProbeAcc& acc) {
  const float z = r.x[i];
  uint32_t key = OrderKey(z);
  if (!Kept(r, key, i)) return;
  if (r.tie_mode) {
    if (key != r.tie) return;
    key = static_cast<uint32_t>(r.n - 1 - i);
  }
  const double w = r.ones ? 1.0 : ExpShifted(z, r.mx) / r.sum;
  SATURN_SAMPLE_UNROLL
  for (int j = 0; j < kProbes; ++j) acc.v[j] += key >= p.key[j] ? w : 0.0;
}

// One element's contribution to the kept sum of exp(z - mx) (divided by sum when `divide`).
SATURN_HD double KeptExpElement(const RowView& r, int i, bool divide) {
  const float z = r.x[i];
  if (!Kept(r, OrderKey(z), i)) return 0.0;
  const double e = ExpShifted(z, r.mx);
  return divide ? e / r.sum : e;
}

// Greedy: running best of one thread, then pairwise merges; the lowest index wins ties and a
// non-NaN beats the "none yet" index n.
SATURN_HD void ArgMaxElement(float v, int i, int n, float& bv, int& bi) {
  if (v > bv || (bi == n && !(v != v))) {
    bv = v;
    bi = i;
  }
}
SATURN_HD void ArgMaxMerge(float ov, int oi, int n, float& bv, int& bi) {
  if (ov > bv || (ov == bv && oi < bi) || (bi == n && oi < n)) {
    bv = ov;
    bi = oi;
  }
}

// Greedy over splits (sampling.cu's split kernel, --cuda_kernels=fused): split s of `splits`
// scans [begin, end) of the row, equal chunks (the last ones may be empty), and the partials
// (each split's best value and index, n for none) merge in split order. (value desc, index
// asc) is a total order on non-NaN values, so the token is the one-block ArgMax's for any
// number of splits.
struct GreedyRange {
  int begin, end;
};
SATURN_HD GreedyRange GreedySplitRange(int n, int splits, int s) {
  const int chunk = (n + splits - 1) / splits;
  const int begin = s * chunk < n ? s * chunk : n;
  return {begin, begin + chunk < n ? begin + chunk : n};
}
template <typename Values, typename Indices>
SATURN_HD int GreedyMerge(Values v, Indices idx, int splits, int n) {
  float bv = -INFINITY;
  int bi = n;
  for (int s = 0; s < splits; ++s) ArgMaxMerge(v[s], idx[s], n, bv, bi);
  return bi < n ? bi : 0;
}

// The block's last combining step: per-warp sums added in warp order from 0.
SATURN_HD double CombineWarps(const double* warp_sums, int stride) {
  double s = 0.0;
  for (int w = 0; w < kWarps; ++w) s += warp_sums[w * stride];
  return s;
}

struct Selected {
  uint32_t key;
  double base;   // sum of w over keys > key
  double theta;  // theta, lowered to the total when rounding left it out of reach
  bool strict;
};

SATURN_HD bool Reaches(double f, double theta, bool strict) {
  return strict ? f > theta : f >= theta;
}

// Block is the execution policy: sampling.cu's DeviceBlock (one CUDA block per row) or
// EmulatedBlock below. Both provide, with identical results in every thread:
//   void ProbeSums(const RowView&, const Probes&, ProbeAcc* out);
//   double SumKeptExp(const RowView&, bool divide);
//   float ScaleMax(float* x, int n, float temp);   // x[i] /= temp; max of the new x
//   int ArgMax(const float* x, int n);
template <class Block>
SATURN_HD double SumAtLeast(Block& b, const RowView& r, uint64_t t) {
  Probes p;
  SATURN_SAMPLE_UNROLL
  for (int j = 0; j < kProbes; ++j) p.key[j] = static_cast<uint32_t>(t > 0xFFFFFFFFull ? 0 : t);
  ProbeAcc out;
  b.ProbeSums(r, p, &out);  // every thread takes part, also when the answer is known
  return t > 0xFFFFFFFFull ? 0.0 : out.v[0];
}

// Largest key T in [0, hi] with sum_{key >= T} w reaching theta.
template <class Block>
SATURN_HD Selected SelectLargest(Block& b, const RowView& r, uint64_t hi, double theta,
                                 bool strict) {
  const double total = SumAtLeast(b, r, 0);
  if (!Reaches(total, theta, strict)) {
    theta = total;  // u rounded past the total mass: take the last element
    strict = false;
  }
  uint64_t lo = 0;
  while (lo < hi) {
    const uint64_t step = (hi - lo + kProbes) / (kProbes + 1);
    Probes p;
    SATURN_SAMPLE_UNROLL
    for (int j = 0; j < kProbes; ++j) {
      const uint64_t v = lo + step * (j + 1);
      p.key[j] = static_cast<uint32_t>(v < hi ? v : hi);
    }
    ProbeAcc out;
    b.ProbeSums(r, p, &out);
    int best = -1;
    SATURN_SAMPLE_UNROLL
    for (int j = 0; j < kProbes; ++j) {
      if (best == j - 1 && Reaches(out.v[j], theta, strict)) best = j;
    }
    if (best < 0) {
      hi = p.key[0] - 1;
    } else if (best == kProbes - 1) {
      lo = p.key[best];
    } else {
      lo = p.key[best];
      hi = p.key[best + 1] - 1;
    }
  }
  return Selected{static_cast<uint32_t>(lo), SumAtLeast(b, r, lo + 1), theta, strict};
}

// Index of the first kept element in (z desc, index asc) order whose inclusive prefix sum
// of w reaches theta (> theta when strict).
template <class Block>
SATURN_HD int SelectIndex(Block& b, RowView r, double theta, bool strict) {
  r.tie_mode = false;
  const Selected v = SelectLargest(b, r, 0xFFFFFFFFull, theta, strict);
  r.tie_mode = true;
  r.tie = v.key;
  const Selected t =
      SelectLargest(b, r, static_cast<uint64_t>(r.n - 1), v.theta - v.base, v.strict);
  return r.n - 1 - static_cast<int>(t.key);
}

// The row semantics of Backend::Sample. x is the row's logits, rewritten in place to z.
template <class Block>
SATURN_HD int SampleRowSearch(Block& b, float* x, int n, float temp, int top_k, float top_p,
                              int64_t seed, int32_t step) {
  if (!(temp > 0.0f)) return b.ArgMax(x, n);
  const float mx = b.ScaleMax(x, n, temp);  // the maximum z is always kept
  // Everything is kept to start with: the bound is the last element in order.
  RowView r{x, n, /*ones=*/true, false, 0u, 0u, n - 1, static_cast<double>(mx), 1.0};
  // top-k on z: the k-th element in (z desc, index asc) order becomes the bound.
  if (top_k > 0 && top_k < n) {
    const int k_idx = SelectIndex(b, r, static_cast<double>(top_k), false);
    r.bound_key = OrderKey(x[k_idx]);
    r.bound_idx = k_idx;
  }
  r.sum = b.SumKeptExp(r, /*divide=*/false);
  r.ones = false;
  // top-p: the shortest prefix whose mass reaches top_p; its last element becomes the bound,
  // and the kept mass is the prefix's summed p. Without top-p the mass is 1 (as the CPU twin).
  double mass = 1.0;
  if (top_p < 1.0f) {
    const int p_idx = SelectIndex(b, r, static_cast<double>(top_p), false);
    r.bound_key = OrderKey(x[p_idx]);
    r.bound_idx = p_idx;
    mass = b.SumKeptExp(r, /*divide=*/true);
  }
  const double u = SampleUniform(seed, step) * mass;
  return SelectIndex(b, r, u, /*strict=*/true);
}

#if !defined(__CUDA_ARCH__)
// The device partition and combining order, replayed on the host one thread at a time:
// thread t visits i = t, t + kThreads, ...; lane sums use the xor butterfly with offsets
// 16, 8, 4, 2, 1 (lane l adds lane l^o), as __shfl_xor_sync does; warps add in index order.
class EmulatedBlock {
 public:
  static double WarpSum(const double* lanes) {
    double v[kWarpSize], t[kWarpSize];
    for (int l = 0; l < kWarpSize; ++l) v[l] = lanes[l];
    for (int o = kWarpSize / 2; o > 0; o >>= 1) {
      for (int l = 0; l < kWarpSize; ++l) t[l] = v[l] + v[l ^ o];
      for (int l = 0; l < kWarpSize; ++l) v[l] = t[l];
    }
    return v[0];
  }
  static double BlockSum(const double* per_thread) {
    double warps[kWarps];
    for (int w = 0; w < kWarps; ++w) warps[w] = WarpSum(per_thread + w * kWarpSize);
    return CombineWarps(warps, 1);
  }

  void ProbeSums(const RowView& r, const Probes& p, ProbeAcc* out) {
    ++passes_;
    for (int t = 0; t < kThreads; ++t) {
      for (int j = 0; j < kProbes; ++j) acc_[t].v[j] = 0.0;
      for (int i = t; i < r.n; i += kThreads) ProbeElement(r, i, p, acc_[t]);
    }
    for (int j = 0; j < kProbes; ++j) {
      double part[kThreads];
      for (int t = 0; t < kThreads; ++t) part[t] = acc_[t].v[j];
      out->v[j] = BlockSum(part);
    }
  }
  double SumKeptExp(const RowView& r, bool divide) {
    ++passes_;
    double part[kThreads];
    for (int t = 0; t < kThreads; ++t) {
      part[t] = 0.0;
      for (int i = t; i < r.n; i += kThreads) part[t] += KeptExpElement(r, i, divide);
    }
    return BlockSum(part);
  }
  float ScaleMax(float* x, int n, float temp) {
    ++passes_;
    float mx = -INFINITY;
    for (int i = 0; i < n; ++i) {
      x[i] = x[i] / temp;
      mx = fmaxf(mx, x[i]);
    }
    return mx;
  }
  int ArgMax(const float* x, int n) {
    float bv;
    int bi;
    ArgMaxRange(x, 0, n, n, &bv, &bi);
    return bi < n ? bi : 0;
  }
  // The best of x[begin, end) as the device block finds it (value, and index or n for none).
  void ArgMaxRange(const float* x, int begin, int end, int n, float* best_v, int* best_i) {
    ++passes_;
    float wv[kWarps];
    int wi[kWarps];
    for (int w = 0; w < kWarps; ++w) {
      float lv[kWarpSize];
      int li[kWarpSize];
      for (int l = 0; l < kWarpSize; ++l) {
        lv[l] = -INFINITY;
        li[l] = n;
        for (int i = begin + w * kWarpSize + l; i < end; i += kThreads)
          ArgMaxElement(x[i], i, n, lv[l], li[l]);
      }
      for (int o = kWarpSize / 2; o > 0; o >>= 1) {
        float tv[kWarpSize];
        int ti[kWarpSize];
        for (int l = 0; l < kWarpSize; ++l) {
          tv[l] = lv[l];
          ti[l] = li[l];
          ArgMaxMerge(lv[l ^ o], li[l ^ o], n, tv[l], ti[l]);
        }
        for (int l = 0; l < kWarpSize; ++l) {
          lv[l] = tv[l];
          li[l] = ti[l];
        }
      }
      wv[w] = lv[0];
      wi[w] = li[0];
    }
    float bv = -INFINITY;
    int bi = n;
    for (int w = 0; w < kWarps; ++w) ArgMaxMerge(wv[w], wi[w], n, bv, bi);
    *best_v = bv;
    *best_i = bi;
  }
  int passes() const { return passes_; }

 private:
  ProbeAcc acc_[kThreads];
  int passes_ = 0;
};
#endif

}  // namespace saturn::sample_search
