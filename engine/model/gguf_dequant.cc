// Dequantization of the ggml block formats Saturn reads (gguf_dequant.h), value for value as
// ggml-quants.c's dequantize_row_* (little-endian fields; the file's bytes are read with
// memcpy, never through a cast, so unaligned blocks are fine).
#include "engine/model/gguf_dequant.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/half_float.h"
#include "kernels/quant_blocks.h"

namespace saturn {
namespace {

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Sub-block j's 6-bit scale and min from a Q4_K block's 12 packed bytes.
void ScaleMinK4(int j, const uint8_t* q, int* d, int* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void Q4_K(const uint8_t* b, float* y) {
  const float d = F16ToF32(Load16(b)), dmin = F16ToF32(Load16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    int sc, m;
    ScaleMinK4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    ScaleMinK4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
  }
}

void Q6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = F16ToF32(Load16(b + 208));
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[is] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
  }
}

}  // namespace

GgmlTypeInfo GgmlTypeOf(uint32_t type) {
  switch (type) {
    case kGgmlF32:
      return {"f32", 1, 4};
    case kGgmlF16:
      return {"f16", 1, 2};
    case kGgmlBF16:
      return {"bf16", 1, 2};
    case kGgmlQ8_0:
      return {"q8_0", 32, 34};
    case kGgmlQ4_0:
      return {"q4_0", 32, 18};
    case kGgmlQ4_K:
      return {"q4_K", 256, 144};
    case kGgmlQ6_K:
      return {"q6_K", 256, 210};
    default:
      return {};
  }
}

const char* GgmlTypeName(uint32_t type) {
  if (const GgmlTypeInfo t = GgmlTypeOf(type); t.name != nullptr) return t.name;
  // ggml's other ids, named so a refusal says what the file holds.
  static constexpr const char* kOthers[] = {nullptr,
                                            nullptr,
                                            nullptr,
                                            "q4_1",
                                            "q4_2 (removed)",
                                            "q4_3 (removed)",
                                            "q5_0",
                                            "q5_1",
                                            nullptr,
                                            "q8_1",
                                            "q2_K",
                                            "q3_K",
                                            nullptr,
                                            "q5_K",
                                            nullptr,
                                            "q8_K",
                                            "iq2_xxs",
                                            "iq2_xs",
                                            "iq3_xxs",
                                            "iq1_s",
                                            "iq4_nl",
                                            "iq3_s",
                                            "iq2_s",
                                            "iq4_xs",
                                            "i8",
                                            "i16",
                                            "i32",
                                            "i64",
                                            "f64",
                                            "iq1_m"};
  if (type < sizeof(kOthers) / sizeof(kOthers[0]) && kOthers[type] != nullptr) {
    return kOthers[type];
  }
  return "unknown";
}

absl::Status Dequantize(uint32_t type, absl::Span<const uint8_t> src, int64_t count, float* dst) {
  const GgmlTypeInfo t = GgmlTypeOf(type);
  if (t.name == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("ggml type ", GgmlTypeName(type), " (", type, ") is not one Saturn reads"));
  }
  if (count < 0 || count % t.block_values != 0 ||
      static_cast<uint64_t>(count / t.block_values) * t.block_bytes > src.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(count, " ", t.name, " values need ", count / t.block_values * t.block_bytes,
                     " bytes in whole blocks; ", src.size(), " given"));
  }
  const uint8_t* p = src.data();
  switch (type) {
    case kGgmlF32:
      std::memcpy(dst, p, static_cast<size_t>(count) * 4);
      break;
    case kGgmlF16:
      for (int64_t i = 0; i < count; ++i) dst[i] = F16ToF32(Load16(p + 2 * i));
      break;
    case kGgmlBF16:
      for (int64_t i = 0; i < count; ++i) dst[i] = Bf16ToF32(Load16(p + 2 * i));
      break;
    case kGgmlQ8_0:  // the blocks the CPU backend streams: kernels/quant_blocks.h decodes them
    case kGgmlQ4_0:
      return DequantizeRows(type == kGgmlQ8_0 ? DType::kQ8_0 : DType::kQ4_0, p, 1, count, dst);
    default:
      for (int64_t b = 0; b < count / t.block_values; ++b) {
        const uint8_t* blk = p + b * t.block_bytes;
        float* y = dst + b * t.block_values;
        if (type == kGgmlQ4_K) Q4_K(blk, y);
        if (type == kGgmlQ6_K) Q6_K(blk, y);
      }
  }
  return absl::OkStatus();
}

}  // namespace saturn
