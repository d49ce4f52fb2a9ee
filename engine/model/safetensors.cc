// Safetensors reading (header validation, per-tensor reads converted to f32) and writing (with
// round-to-nearest-even conversion to BF16/F16). Reads only the bytes of the requested tensor:
// checkpoints may be several GB. Never throws; JSON errors become absl::Status.
#include "engine/model/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/base/json_depth.h"
#include "kernels/base/status_macros.h"
#include "kernels/half_float.h"

namespace saturn {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; Saturn assumes a little-endian host");

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Element size of every dtype the format defines; 0 for a name the format does not know.
int DtypeSize(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2") {
    return 1;
  }
  return 0;
}

// Product of dims, or nullopt-like -1 on a negative dim or overflow past 2^62.
int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > (int64_t{1} << 62) / d) return -1;
    n *= d;
  }
  return n;
}

absl::Status ParseHeader(const std::string& path, const std::string& text, uint64_t data_size,
                         std::map<std::string, SafetensorInfo>* out) {
  RETURN_IF_ERROR(CheckJsonDepth(text, kMaxFileJsonDepth, absl::StrCat(path, ": header")));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header is not valid JSON"));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header is not a JSON object"));
  }
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") continue;
    const std::string where = absl::StrCat(path, ": tensor ", name);
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets")) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": entry needs dtype, shape and data_offsets"));
    }
    const auto& dtype = entry["dtype"];
    const auto& shape = entry["shape"];
    const auto& offsets = entry["data_offsets"];
    if (!dtype.is_string()) return absl::InvalidArgumentError(where + ": dtype is not a string");
    if (!shape.is_array()) return absl::InvalidArgumentError(where + ": shape is not a list");
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      return absl::InvalidArgumentError(where + ": data_offsets must be two unsigned integers");
    }
    SafetensorInfo info;
    info.dtype = dtype.get<std::string>();
    for (const auto& d : shape) {
      if (!d.is_number_unsigned()) {
        return absl::InvalidArgumentError(where + ": shape entries must be unsigned integers");
      }
      info.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    info.begin = offsets[0].get<uint64_t>();
    info.end = offsets[1].get<uint64_t>();
    const int elem = DtypeSize(info.dtype);
    if (elem == 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has unknown dtype ", info.dtype));
    }
    const int64_t n = NumElements(info.shape);
    if (n < 0) return absl::InvalidArgumentError(where + ": shape is too large");
    if (info.end < info.begin ||
        info.end - info.begin != static_cast<uint64_t>(n) * static_cast<uint64_t>(elem)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": data_offsets [", info.begin, ", ", info.end, ") span ",
                       info.end >= info.begin ? info.end - info.begin : 0, " bytes but ",
                       info.dtype, " shape implies ", static_cast<uint64_t>(n) * elem));
    }
    if (info.end > data_size) {
      return absl::DataLossError(absl::StrCat(where, " is truncated: data ends at byte ", info.end,
                                              " of a ", data_size, "-byte data section"));
    }
    (*out)[name] = std::move(info);
  }
  // As the format's reference reader (safetensors' Metadata::validate) requires, tensors
  // cover the data section end to end. Two tensors over the same bytes would load as one
  // silently; a gap is bytes no tensor owns (a tensor listed twice keeps only its last entry,
  // so the first one's bytes are left over); trailing bytes are data past the last tensor.
  std::vector<std::tuple<uint64_t, uint64_t, const std::string*>> spans;
  for (const auto& [name, info] : *out) spans.push_back({info.begin, info.end, &name});
  std::sort(spans.begin(), spans.end());
  uint64_t covered = 0;
  const std::string* last = nullptr;
  for (const auto& [begin, end, name] : spans) {
    if (begin < covered) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensors ", *last, " and ", *name, " overlap (", *name,
                       " starts at byte ", begin, ", before ", *last, " ends at ", covered, ")"));
    }
    if (begin > covered) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": bytes [", covered, ", ", begin, ") of the data section, before tensor ", *name,
          ", belong to no tensor (tensors lie end to end: is one listed twice?)"));
    }
    covered = end;
    last = name;
  }
  if (covered != data_size) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the data section has ", data_size,
                                                   " bytes but its tensors end at byte ", covered,
                                                   " (", data_size - covered, " trailing bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(path, ": cannot stat: ", ec.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  if (file_size < 8) {
    return absl::DataLossError(absl::StrCat(path, ": truncated (", file_size, " bytes)"));
  }
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  if (!in) return absl::DataLossError(absl::StrCat(path, ": cannot read header length"));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header length ", header_len,
                                                   " exceeds the 100 MB limit (corrupt file?)"));
  }
  if (header_len > file_size - 8) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: header length ", header_len,
                                            " exceeds the file size ", file_size));
  }
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  if (!in) return absl::DataLossError(absl::StrCat(path, ": cannot read header"));

  SafetensorsFile file;
  file.path_ = path;
  file.data_start_ = 8 + header_len;
  try {
    RETURN_IF_ERROR(ParseHeader(path, header, file_size - file.data_start_, &file.tensors_));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad header: ", e.what()));
  }
  return file;
}

absl::StatusOr<std::vector<float>> SafetensorsFile::ReadF32(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor ", name));
  }
  const SafetensorInfo& info = it->second;
  if (info.dtype != "F32" && info.dtype != "BF16" && info.dtype != "F16") {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor ", name,
                                                   " has unsupported dtype ", info.dtype,
                                                   " (supported: F32, BF16, F16)"));
  }
  const uint64_t bytes = info.end - info.begin;
  const size_t elem = info.dtype == "F32" ? 4 : 2;
  const size_t n = bytes / elem;
  std::vector<float> out;
  try {
    out.resize(n);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(path_, ": tensor ", name, " does not fit"));
  }
  std::ifstream in(path_, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path_, ": cannot open"));
  in.seekg(static_cast<std::streamoff>(data_start_ + info.begin));
  // Read raw bytes into the front of the output buffer, then widen in place from the back
  // (element i's source bytes [2i, 2i+2) always lie below its destination [4i, 4i+4)).
  char* raw = reinterpret_cast<char*>(out.data());
  in.read(raw, static_cast<std::streamsize>(bytes));
  if (!in || static_cast<uint64_t>(in.gcount()) != bytes) {
    return absl::DataLossError(absl::StrCat(path_, ": tensor ", name, " is truncated"));
  }
  if (elem == 2) {
    const bool bf16 = info.dtype == "BF16";
    for (size_t i = n; i-- > 0;) {
      uint16_t h;
      std::memcpy(&h, raw + 2 * i, 2);
      out[i] = bf16 ? Bf16ToF32(h) : F16ToF32(h);
    }
  }
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  std::string header;
  try {
    nlohmann::json j = nlohmann::json::object();
    std::set<std::string> names;
    uint64_t offset = 0;
    for (const TensorToWrite& t : tensors) {
      if (t.name == "__metadata__" || !names.insert(t.name).second) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": bad or duplicate name ", t.name));
      }
      if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16") {
        return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", t.name,
                                                       " has unsupported dtype ", t.dtype,
                                                       " (supported: F32, BF16, F16)"));
      }
      const int64_t n = NumElements(t.shape);
      if (n < 0 || static_cast<uint64_t>(n) != t.values.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": tensor ", t.name, " has ", t.values.size(), " values but shape implies ", n));
      }
      const uint64_t bytes = static_cast<uint64_t>(n) * DtypeSize(t.dtype);
      j[t.name] = {
          {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
    }
    header = j.dump();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(path, ": cannot build header: ", e.what()));
  }
  header.append((8 - header.size() % 8) % 8, ' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create"));
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  out.write(reinterpret_cast<const char*>(len_bytes), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  std::vector<uint16_t> half;
  for (const TensorToWrite& t : tensors) {
    if (t.dtype == "F32") {
      out.write(reinterpret_cast<const char*>(t.values.data()),
                static_cast<std::streamsize>(t.values.size() * sizeof(float)));
      continue;
    }
    half.resize(t.values.size());
    for (size_t i = 0; i < t.values.size(); ++i) {
      half[i] = t.dtype == "BF16" ? F32ToBf16(t.values[i]) : F32ToF16(t.values[i]);
    }
    out.write(reinterpret_cast<const char*>(half.data()),
              static_cast<std::streamsize>(half.size() * 2));
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace saturn
