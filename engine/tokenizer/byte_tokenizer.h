// The built-in byte-level tokenizer for the built-in presets: id 0 = <pad>, 1 = <bos>,
// 2 = <eos>, 3 + b = byte b. Ids >= 259 have no text (the preset vocabularies are larger than
// 259; their extra ids decode to nothing). Stateless and thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace saturn {

class ByteTokenizer {
 public:
  static constexpr int kPad = 0;
  static constexpr int kBos = 1;
  static constexpr int kEos = 2;
  static constexpr int kByteOffset = 3;

  // BOS followed by one id per byte.
  std::vector<int> Encode(std::string_view text, bool add_bos = true) const;
  // Bytes of byte ids; special and out-of-range ids are skipped.
  std::string Decode(const std::vector<int>& ids) const;
  // Whether the id maps to a byte.
  static bool IsByte(int id) { return id >= kByteOffset && id < kByteOffset + 256; }
};

}  // namespace saturn
