// Fuzz target: a GGUF file. Parse checks the header, the metadata, the tensor table and every
// tensor's extent against the input's size; each tensor it accepts is then dequantized. An
// error or the values, never a crash or a read out of bounds.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/model/gguf_dequant.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<std::unique_ptr<saturn::GgufFile>> f =
      saturn::GgufFile::Parse(absl::MakeConstSpan(data, size), "fuzz.gguf");
  if (!f.ok()) return 0;
  for (const saturn::GgufTensor& t : (*f)->tensors()) {
    if (t.elements() > (1 << 20)) continue;
    std::vector<float> out(static_cast<size_t>(t.elements()));
    (void)saturn::Dequantize(t.type, (*f)->Data(t), t.elements(), out.data());
  }
  return 0;
}
