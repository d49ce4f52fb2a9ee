// Skinny GEMM for decode (M <= kSkinnyMaxRows), --cuda_kernels=fused: out[M, N] = x[M, K] w[N, K]^T
// as a weight stream. Each warp owns kSkinnyCols output columns over a slice of k and reads
// their weight rows once, 16 bytes a lane, for all M rows of x (which sit in L1/L2); the
// slices of a column pair are summed in shared memory. The outputs may be several tensors
// side by side (GemmSplit: q, k and v from the fused projection in one launch, where the baseline
// set runs three cuBLAS GEMMs).
//
// Why: at M = 1 cuBLAS runs these GEMMs on grids of a few dozen blocks, far below the memory
// bandwidth (docs/CUDA.md, kernel sets). kernel_plan.h sizes this grid to cover every SM twice.
#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernel_plan.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vector_access.cuh"

namespace saturn::gpu {
namespace {

constexpr int kMaxParts = 3;
constexpr int kUnroll = 2;  // 16-byte loads in flight per column per lane

struct SkinnyOuts {
  void* data[kMaxParts];
  int64_t first_col[kMaxParts + 1];  // part p holds columns [first_col[p], first_col[p + 1])
  int parts;
};

__device__ __forceinline__ uint4 LoadStream(const void* p) {
  return __ldcs(reinterpret_cast<const uint4*>(p));  // read once: evict first
}

// Unpacks one 16-byte vector of T into floats.
template <typename T>
__device__ __forceinline__ void Unpack(const uint4& raw, float (&v)[kVec<T>]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec<T>; ++i) v[i] = Load(e, i);
}

// v rounded to T, as a store to a T tensor and a load back would round it.
template <typename T>
__device__ __forceinline__ float RoundTo(float v) {
  T t[1];
  Store(t, 0, v);
  return Load(t, 0);
}

// MT: rows of x the kernel is built for (m <= MT at run time). SWIGLU: w is [gate; up]
// (n = 2F rows) and a warp's column pair is gate column j and up column F + j, so the epilogue
// writes silu(gate) * up to outs.data[0], [M, F] of T, with swiglu.cu's arithmetic on the
// sums rounded to T as gate_up would hold them: the unfused GEMM then SwiGLU, to the bit.
template <typename T, typename TO, int MT, bool SWIGLU>
__global__ void __launch_bounds__(kSkinnyWarps * 32)
    GemmSkinnyKernel(const T* __restrict__ x, const T* __restrict__ w, SkinnyOuts outs, int m,
                     int64_t n, int64_t k, int slices) {
  static_assert(!SWIGLU || kSkinnyCols == 2, "SWIGLU pairs one gate with one up column");
  constexpr int V = kVec<T>;
  __shared__ float red[kSkinnyWarps][MT][kSkinnyCols];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int pairs_per_block = kSkinnyWarps / slices;
  const int slice = warp % slices;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * pairs_per_block + warp / slices;
  const int64_t col0 = pair * kSkinnyCols, half_n = n / 2;
  // The slice's k range, whole 32-lane vector rows (the last slice takes the rest).
  const int64_t row_elems = int64_t{32} * V;
  const int64_t per_slice = (k / slices + row_elems - 1) / row_elems * row_elems;
  const int64_t k_begin = min(k, slice * per_slice);
  const int64_t k_end = slice == slices - 1 ? k : min(k, k_begin + per_slice);

  float acc[MT][kSkinnyCols];
#pragma unroll
  for (int r = 0; r < MT; ++r) {
#pragma unroll
    for (int c = 0; c < kSkinnyCols; ++c) acc[r][c] = 0.0f;
  }
  const T* wr[kSkinnyCols];
  bool live[kSkinnyCols];
#pragma unroll
  for (int c = 0; c < kSkinnyCols; ++c) {
    const int64_t col = SWIGLU ? pair + c * half_n : col0 + c;
    live[c] = SWIGLU ? pair < half_n : col < n;
    wr[c] = w + (live[c] ? col : 0) * k;
  }
  for (int64_t k0 = k_begin + lane * V; k0 < k_end; k0 += row_elems * kUnroll) {
    uint4 raw[kUnroll][kSkinnyCols];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = k0 + u * row_elems;
#pragma unroll
      for (int c = 0; c < kSkinnyCols; ++c) {
        raw[u][c] = live[c] && kk < k_end ? LoadStream(wr[c] + kk) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = k0 + u * row_elems;
      if (kk >= k_end) break;
      float wv[kSkinnyCols][V];
#pragma unroll
      for (int c = 0; c < kSkinnyCols; ++c) Unpack<T>(raw[u][c], wv[c]);
#pragma unroll
      for (int r = 0; r < MT; ++r) {
        if (r >= m) break;
        float xv[V];
        LoadVec(x + r * k, kk, xv);
#pragma unroll
        for (int c = 0; c < kSkinnyCols; ++c) {
#pragma unroll
          for (int e = 0; e < V; ++e) acc[r][c] = fmaf(xv[e], wv[c][e], acc[r][c]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < MT; ++r) {
    if (r >= m) break;
#pragma unroll
    for (int c = 0; c < kSkinnyCols; ++c) {
      const float v = WarpSum(acc[r][c]);
      if (lane == 0) red[warp][r][c] = v;
    }
  }
  __syncthreads();
  if constexpr (SWIGLU) {  // lane r of the pair's first warp: row r's gate and up sums
    if (slice != 0 || lane >= m || pair >= half_n) return;
    float g = 0.0f, u = 0.0f;
    for (int s = 0; s < slices; ++s) {
      g += red[warp + s][lane][0];
      u += red[warp + s][lane][1];
    }
    g = RoundTo<T>(g);
    u = RoundTo<T>(u);
    Store(static_cast<T*>(outs.data[0]), lane * half_n + pair, SiluMul(g, u));
    return;
  }
  // The first warp of each column pair's slices sums them (in slice order) and stores.
  if (slice != 0 || lane >= MT * kSkinnyCols) return;
  const int r = lane / kSkinnyCols, c = lane % kSkinnyCols;
  const int64_t col = col0 + c;
  if (r >= m || col >= n) return;
  float v = 0.0f;
  for (int s = 0; s < slices; ++s) v += red[warp + s][r][c];
  // The part holding `col`, by constant indices only (a dynamic index into the kernel's
  // parameter struct would copy it to local memory).
  void* dst = outs.data[0];
  int64_t first = outs.first_col[0], last = outs.first_col[1];
#pragma unroll
  for (int p = 1; p < kMaxParts; ++p) {
    if (p < outs.parts && col >= outs.first_col[p]) {
      dst = outs.data[p];
      first = outs.first_col[p];
      last = outs.first_col[p + 1];
    }
  }
  Store(static_cast<TO*>(dst), r * (last - first) + (col - first), v);
}

template <typename T, typename TO, int MT, bool SWIGLU>
absl::Status Launch(cudaStream_t s, int num_sms, const Tensor& x, const Tensor& w,
                    const SkinnyOuts& outs) {
  const int64_t n = w.rows, k = w.cols;
  const int slices = SkinnySlices(n, k, num_sms);
  const int64_t cols_per_block = int64_t{kSkinnyWarps / slices} * kSkinnyCols;
  const int64_t blocks = (n + cols_per_block - 1) / cols_per_block;
  if (blocks > INT32_MAX) return absl::InvalidArgumentError("gemm (skinny): n too large");
  GemmSkinnyKernel<T, TO, MT, SWIGLU><<<static_cast<unsigned>(blocks), kSkinnyWarps * 32, 0, s>>>(
      x.as<T>(), w.as<T>(), outs, static_cast<int>(x.rows), n, k, slices);
  CUDA_CHECK_LAUNCH("GemmSkinnyKernel");
  RecordLaunch(KernelFamily::kGemmSkinny,
               reinterpret_cast<const void*>(&GemmSkinnyKernel<T, TO, MT, SWIGLU>), blocks,
               kSkinnyWarps * 32, 0);
  return absl::OkStatus();
}

template <typename T, typename TO, bool SWIGLU = false>
absl::Status ByRows(cudaStream_t s, int num_sms, const Tensor& x, const Tensor& w,
                    const SkinnyOuts& outs) {
  if (x.rows <= 1) return Launch<T, TO, 1, SWIGLU>(s, num_sms, x, w, outs);
  if (x.rows <= 2) return Launch<T, TO, 2, SWIGLU>(s, num_sms, x, w, outs);
  if (x.rows <= 4) return Launch<T, TO, 4, SWIGLU>(s, num_sms, x, w, outs);
  if (x.rows <= 8) return Launch<T, TO, 8, SWIGLU>(s, num_sms, x, w, outs);
  return Launch<T, TO, 16, SWIGLU>(s, num_sms, x, w, outs);
}

}  // namespace

bool GemmSkinnyApplies(const Tensor& x, const Tensor& w, absl::Span<const Tensor> outs) {
  if (x.rows < 1 || x.rows > kSkinnyMaxRows || outs.empty() ||
      outs.size() > static_cast<size_t>(kMaxParts) || x.dtype != w.dtype ||
      (x.dtype != DType::kF32 && x.dtype != DType::kBF16)) {
    return false;
  }
  // Shapes too (Backend checks them, but these entry points are callable directly): the
  // kernel takes k from w, rows from x, and gives the columns to the parts in order.
  if (x.cols != w.cols) return false;
  const DType od = outs[0].dtype;
  if (od != DType::kF32 && od != x.dtype) return false;
  int64_t cols = 0;
  for (const Tensor& o : outs) {
    if (o.dtype != od || o.rows != x.rows || o.data == nullptr) return false;
    cols += o.cols;
  }
  if (cols != w.rows) return false;
  return CanVectorize(x.cols, DTypeSize(x.dtype), {x.data, w.data});
}

absl::Status GemmSkinny(cudaStream_t s, int num_sms, const Tensor& x, const Tensor& w,
                        absl::Span<const Tensor> outs) {
  if (!GemmSkinnyApplies(x, w, outs)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm (skinny): needs 1..", kSkinnyMaxRows, " rows, at most ", kMaxParts,
                     " outputs, matching f32 or bf16 operands and 16-byte rows; got x ",
                     x.ShapeString(), " w ", w.ShapeString()));
  }
  if (w.rows == 0) return absl::OkStatus();
  SkinnyOuts o{};
  o.parts = static_cast<int>(outs.size());
  int64_t col = 0;
  for (int p = 0; p < o.parts; ++p) {
    o.data[p] = outs[p].data;
    o.first_col[p] = col;
    col += outs[p].cols;
  }
  o.first_col[o.parts] = col;
  const bool f32_out = outs[0].dtype == DType::kF32;
  if (x.dtype == DType::kF32) return ByRows<float, float>(s, num_sms, x, w, o);
  if (f32_out) return ByRows<__nv_bfloat16, float>(s, num_sms, x, w, o);
  return ByRows<__nv_bfloat16, __nv_bfloat16>(s, num_sms, x, w, o);
}

bool GemmSkinnySwiGluApplies(const Tensor& x, const Tensor& w, const Tensor& act) {
  // gate_up as the plain kernel would write it (act's dtype, never f32 logits).
  const Tensor gate_up{act.data, act.dtype, x.rows, w.rows};
  return w.rows % 2 == 0 && act.rows == x.rows && act.cols == w.rows / 2 && act.dtype == x.dtype &&
         GemmSkinnyApplies(x, w, {gate_up});
}

absl::Status GemmSkinnySwiGlu(cudaStream_t s, int num_sms, const Tensor& x, const Tensor& w,
                              const Tensor& act) {
  if (!GemmSkinnySwiGluApplies(x, w, act)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm_swiglu (skinny): needs 1..", kSkinnyMaxRows,
        " rows, w of an even number of rows, act [rows, w rows / 2] in x's dtype and 16-byte "
        "rows; got x ",
        x.ShapeString(), " w ", w.ShapeString(), " act ", act.ShapeString()));
  }
  if (w.rows == 0) return absl::OkStatus();
  SkinnyOuts o{};
  o.parts = 1;
  o.data[0] = act.data;
  o.first_col[1] = act.cols;
  if (x.dtype == DType::kF32) return ByRows<float, float, true>(s, num_sms, x, w, o);
  return ByRows<__nv_bfloat16, __nv_bfloat16, true>(s, num_sms, x, w, o);
}

}  // namespace saturn::gpu
