// Reading and writing the safetensors format: an 8-byte little-endian header length, a JSON
// header mapping tensor names to {dtype, shape, data_offsets}, then the raw bytes. Owns file
// parsing only; engine/model/weights.cc maps tensors to the model.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace saturn {

struct SafetensorInfo {
  std::string dtype;  // "F32", "BF16", "F16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Reads the header and checks every tensor's offsets against the file size.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorInfo>& tensors() const { return tensors_; }
  // Reads a tensor converted to f32 (F32, BF16 and F16 supported; others are an error
  // naming the dtype).
  absl::StatusOr<std::vector<float>> ReadF32(const std::string& name) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorInfo> tensors_;
};

struct TensorToWrite {
  std::string name;
  std::string dtype;  // "F32", "BF16" or "F16"
  std::vector<int64_t> shape;
  std::vector<float> values;  // converted to dtype on write
};

// Writes a safetensors file (used by tests and tools to make checkpoints).
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

}  // namespace saturn
