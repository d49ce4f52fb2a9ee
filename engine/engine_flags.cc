// The engine flags (engine_flags.h). Their help and defaults are the ones every binary that
// links saturn_engine_flags shows; the defaults are EngineConfig's (engine.h).
#include "engine/engine_flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, model, "small",
          "Built-in preset (tiny, small, 1b) or a Hugging Face Llama checkpoint directory");
ABSL_FLAG(std::string, backend, "auto", "auto | cpu | cuda");
ABSL_FLAG(int, threads, 0, "CPU backend threads (0: all cores)");
ABSL_FLAG(std::string, dtype, "auto",
          "Weights: auto | f32 | bf16 | q8_0 | q4_0 (CPU backend; auto: bf16 where the CPU has "
          "native bf16 dot products, else f32; q8_0 and q4_0 as --quantization)");
ABSL_FLAG(std::string, quantization, "auto",
          "GEMM weights in llama.cpp's block formats, quantized at load: auto | none | q8_0 | q4_0 "
          "(CPU backend; auto: a GGUF file's own format where every layer matrix is q8_0 or q4_0, "
          "q8_0 where they are all block-quantized in other types such as Q4_K_M, else none)");
ABSL_FLAG(std::string, kv_cache_dtype, "auto",
          "KV cache: auto | f32 | bf16 (CPU backend; auto: the weights' dtype, as vLLM's "
          "--kv-cache-dtype auto)");
ABSL_FLAG(std::string, batch_invariant, "auto",
          "auto | on | off: on, a request's tokens and logprobs are bit-identical whatever else "
          "runs beside it (auto: on for the CPU backend, off for CUDA, where on takes slower "
          "fixed-order GEMM and attention kernels); off lets the CPU pick the fastest GEMM path "
          "per batch size");
ABSL_FLAG(std::string, cuda_kernels, "baseline",
          "baseline | fused (v1 and v2 are accepted for them): CUDA kernel set; fused adds a "
          "weight-streaming GEMM for 1-16 rows (q, k, v in one launch), split-K GQA decode "
          "attention, SwiGLU and RoPE fused into their neighbours (not yet verified on a GPU; "
          "baseline is cuBLAS and per-head attention)");
ABSL_FLAG(int, tensor_parallel, 1,
          "Split the model's heads and SwiGLU width over this many ranks (Megatron tensor "
          "parallelism, CPU backend): start one process per rank under an MPI launcher, "
          "`mpirun -np N saturn-server --tensor_parallel N ...`; rank 0 serves, the others "
          "compute their shard of every step. N must divide the heads, KV heads and SwiGLU width");

namespace saturn {

EngineConfig EngineConfigFromFlags() {
  EngineConfig config;
  config.model = absl::GetFlag(FLAGS_model);
  config.backend = absl::GetFlag(FLAGS_backend);
  config.num_threads = absl::GetFlag(FLAGS_threads);
  config.dtype = absl::GetFlag(FLAGS_dtype);
  config.kv_cache_dtype = absl::GetFlag(FLAGS_kv_cache_dtype);
  config.quantization = absl::GetFlag(FLAGS_quantization);
  config.batch_invariant = absl::GetFlag(FLAGS_batch_invariant);
  config.cuda_kernels = absl::GetFlag(FLAGS_cuda_kernels);
  config.tensor_parallel = absl::GetFlag(FLAGS_tensor_parallel);
  return config;
}

}  // namespace saturn
