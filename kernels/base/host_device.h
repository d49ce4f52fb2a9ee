// SATURN_HD marks a small function callable from host and device code: __host__ __device__
// under nvcc, plain inline elsewhere, so one definition serves the CPU and CUDA backends.
#pragma once

#if defined(__CUDACC__)
#define SATURN_HD __host__ __device__ __forceinline__
#else
#define SATURN_HD inline
#endif
