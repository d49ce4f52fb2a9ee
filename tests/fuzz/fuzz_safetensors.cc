// Fuzz target: a safetensors file (8-byte header length, JSON header, data). Open checks the
// header and every tensor's offsets against the file size; each tensor the header accepts is
// then read. An error or the tensors, never a crash or a read out of bounds.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "engine/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Open takes a path: one file per process, rewritten for each input.
  static const std::string path = "/tmp/saturn-fuzz-" + std::to_string(getpid()) + ".safetensors";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  absl::StatusOr<saturn::SafetensorsFile> file = saturn::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  for (const auto& [name, info] : file->tensors()) {
    absl::StatusOr<std::vector<float>> values = file->ReadF32(name);
    (void)values;
  }
  return 0;
}
