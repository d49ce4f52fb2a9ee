// Fuzz target: a saturn-load JSONL prompt file through ParseJsonlWorkload, then its first
// items drawn. A workload or an error naming file:line, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "clients/load/workload.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  saturn::clients::LengthSpec output;
  output.a = 8;
  saturn::clients::ModelLimits limits;
  limits.vocab_size = 4096;
  limits.max_model_len = 512;
  auto workload = saturn::clients::ParseJsonlWorkload("fuzz.jsonl", text, output, limits, 1);
  if (workload.ok()) {
    for (int i = 0; i < 4; ++i) (void)(*workload)->Get(i);
  }
  return 0;
}
