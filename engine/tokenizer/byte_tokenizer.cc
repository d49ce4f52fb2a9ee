// The byte-level tokenizer: every byte is its own token, offset past the three special ids.
// Stateless; cannot fail.
#include "engine/tokenizer/byte_tokenizer.h"

namespace saturn {

std::vector<int> ByteTokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int> ids;
  ids.reserve(text.size() + (add_bos ? 1 : 0));
  if (add_bos) ids.push_back(kBos);
  for (char c : text) ids.push_back(kByteOffset + static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::Decode(const std::vector<int>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int id : ids) {
    if (IsByte(id)) text.push_back(static_cast<char>(id - kByteOffset));
  }
  return text;
}

}  // namespace saturn
