// GGUF files (llama.cpp's format, versions 2 and 3) read as they are: the header, the metadata
// key/value pairs and the tensor table are parsed and checked against the file's size before
// anything is used, and the tensor data stays in a read-only memory map. Every refusal names
// the field (and the tensor or key) and the limit it broke; nothing is ever read past the end.
//
//   "GGUF" | version u32 | tensor count u64 | metadata count u64
//   metadata: key (u64 length + bytes) | value type u32 | value (arrays: type u32, count u64)
//   tensors:  name | dims u32 | dims x u64 (ne0 contiguous first) | ggml type u32 | offset u64
//   padding to general.alignment (default 32) | tensor data (each offset from here, aligned)
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace saturn {

// A metadata value: one of the scalar kinds or an array of values.
struct GgufValue {
  enum class Kind { kUint, kInt, kFloat, kBool, kString, kArray };
  Kind kind = Kind::kUint;
  uint64_t u = 0;  // kUint (u8 .. u64)
  int64_t i = 0;   // kInt (i8 .. i64)
  double f = 0;    // kFloat (f32, f64)
  bool b = false;
  std::string s;
  std::vector<GgufValue> array;
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> dims;  // ne0 (contiguous) first, as GGUF stores them
  uint32_t type = 0;          // ggml type id (gguf_dequant.h)
  uint64_t offset = 0;        // from the start of the data section
  size_t bytes = 0;           // its data's size for its type and dims
  int64_t elements() const;
};

class GgufFile {
 public:
  // Maps `path` read-only and parses it.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses bytes already in memory (kept by the caller while the result lives); `name` stands
  // for the file in errors.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(absl::Span<const uint8_t> bytes,
                                                         const std::string& name);
  ~GgufFile();

  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(const std::string& name) const;
  // The tensor's bytes (inside the file: checked at parse).
  absl::Span<const uint8_t> Data(const GgufTensor& t) const;

  // Typed metadata lookups: NOT_FOUND or INVALID_ARGUMENT (wrong kind) naming the key.
  absl::StatusOr<uint64_t> GetUint(const std::string& key) const;
  absl::StatusOr<double> GetFloat(const std::string& key) const;
  absl::StatusOr<std::string> GetString(const std::string& key) const;
  bool Has(const std::string& key) const { return metadata_.count(key) != 0; }
  const std::string& name() const { return name_; }

 private:
  GgufFile() = default;
  std::string name_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> by_name_;
  const uint8_t* data_ = nullptr;  // the data section
  void* map_ = nullptr;            // the mapping (Open only)
  size_t map_bytes_ = 0;
};

// Limits a file must stay within (beyond its own size).
inline constexpr uint64_t kGgufMaxTensors = 1 << 20, kGgufMaxMetadata = 1 << 20;
inline constexpr int kGgufMaxDims = 4, kGgufMaxArrayDepth = 2;

}  // namespace saturn
