// GGUF parsing (gguf.h): a cursor that refuses any read past the end, the metadata values,
// the tensor table, and the checks that each tensor's data lies inside the file.
#include "engine/model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/model/gguf_dequant.h"
#include "kernels/base/status_macros.h"

namespace saturn {
namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;

// GGUF value type ids.
enum : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

class Cursor {
 public:
  Cursor(absl::Span<const uint8_t> bytes, const std::string& name) : b_(bytes), name_(name) {}
  size_t pos() const { return pos_; }
  size_t left() const { return b_.size() - pos_; }

  absl::Status Bytes(void* out, size_t n, const std::string& field) {
    if (n > left()) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": ", field, " needs ", n,
                                                     " bytes at offset ", pos_, "; the file has ",
                                                     left(), " left (truncated?)"));
    }
    std::memcpy(out, b_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }
  template <typename T>
  absl::StatusOr<T> Read(const std::string& field) {
    T v;
    RETURN_IF_ERROR(Bytes(&v, sizeof(T), field));
    return v;
  }
  absl::StatusOr<std::string> String(const std::string& field) {
    ASSIGN_OR_RETURN(const uint64_t n, Read<uint64_t>(field + " length"));
    if (n > kMaxStringBytes || n > left()) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, ": ", field, " length ", n, " exceeds the ", left(), " bytes left in the file"));
    }
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  absl::Status Fail(const std::string& field, const std::string& why) const {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": ", field, ": ", why));
  }

 private:
  absl::Span<const uint8_t> b_;
  size_t pos_ = 0;
  const std::string& name_;
};

// Smallest encoded size of a value of `type` (to bound array counts by the bytes left).
uint64_t MinBytes(uint32_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kU64:
    case kI64:
    case kF64:
    case kString:
      return 8;
    case kArray:
      return 12;
    default:
      return 0;
  }
}

// A number of type T, kept as `kind` (u, i or f).
template <typename T>
absl::StatusOr<GgufValue> Scalar(Cursor& c, const std::string& key, GgufValue::Kind kind) {
  ASSIGN_OR_RETURN(const T x, c.Read<T>("value of " + key));
  GgufValue v;
  v.kind = kind;
  if (kind == GgufValue::Kind::kUint) v.u = static_cast<uint64_t>(x);
  if (kind == GgufValue::Kind::kInt) v.i = static_cast<int64_t>(x);
  if (kind == GgufValue::Kind::kFloat) v.f = static_cast<double>(x);
  return v;
}

absl::StatusOr<GgufValue> ReadValue(Cursor& c, uint32_t type, const std::string& key, int depth) {
  GgufValue v;
  switch (type) {
    case kU8:
      return Scalar<uint8_t>(c, key, GgufValue::Kind::kUint);
    case kU16:
      return Scalar<uint16_t>(c, key, GgufValue::Kind::kUint);
    case kU32:
      return Scalar<uint32_t>(c, key, GgufValue::Kind::kUint);
    case kU64:
      return Scalar<uint64_t>(c, key, GgufValue::Kind::kUint);
    case kI8:
      return Scalar<int8_t>(c, key, GgufValue::Kind::kInt);
    case kI16:
      return Scalar<int16_t>(c, key, GgufValue::Kind::kInt);
    case kI32:
      return Scalar<int32_t>(c, key, GgufValue::Kind::kInt);
    case kI64:
      return Scalar<int64_t>(c, key, GgufValue::Kind::kInt);
    case kF32:
      return Scalar<float>(c, key, GgufValue::Kind::kFloat);
    case kF64:
      return Scalar<double>(c, key, GgufValue::Kind::kFloat);
    case kBool: {
      ASSIGN_OR_RETURN(const uint8_t x, c.Read<uint8_t>("value of " + key));
      if (x > 1) return c.Fail(key, absl::StrCat("a bool must be 0 or 1, got ", x));
      v.kind = GgufValue::Kind::kBool;
      v.b = x == 1;
      return v;
    }
    case kString: {
      ASSIGN_OR_RETURN(v.s, c.String("value of " + key));
      v.kind = GgufValue::Kind::kString;
      return v;
    }
    case kArray: {
      if (depth >= kGgufMaxArrayDepth) {
        return c.Fail(key, absl::StrCat("arrays nest at most ", kGgufMaxArrayDepth, " deep"));
      }
      ASSIGN_OR_RETURN(const uint32_t elem, c.Read<uint32_t>("array type of " + key));
      ASSIGN_OR_RETURN(const uint64_t n, c.Read<uint64_t>("array length of " + key));
      const uint64_t min = MinBytes(elem);
      if (min == 0) return c.Fail(key, absl::StrCat("unknown array element type ", elem));
      if (n > c.left() / min) {
        return c.Fail(key, absl::StrCat("array of ", n, " elements cannot fit in the ", c.left(),
                                        " bytes left"));
      }
      v.kind = GgufValue::Kind::kArray;
      v.array.reserve(n);
      for (uint64_t k = 0; k < n; ++k) {
        ASSIGN_OR_RETURN(GgufValue e, ReadValue(c, elem, key, depth + 1));
        v.array.push_back(std::move(e));
      }
      return v;
    }
    default:
      return c.Fail(key, absl::StrCat("unknown value type ", type));
  }
}

}  // namespace

int64_t GgufTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

GgufFile::~GgufFile() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(absl::StrCat(path, ": cannot open (", strerror(errno), ")"));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty or unreadable"));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    return absl::InternalError(absl::StrCat(path, ": mmap failed (", strerror(errno), ")"));
  }
  absl::StatusOr<std::unique_ptr<GgufFile>> f =
      Parse(absl::MakeConstSpan(static_cast<const uint8_t*>(map), bytes), path);
  if (!f.ok()) {
    munmap(map, bytes);
    return f.status();
  }
  (*f)->map_ = map;
  (*f)->map_bytes_ = bytes;
  return f;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(absl::Span<const uint8_t> bytes,
                                                          const std::string& name) {
  std::unique_ptr<GgufFile> f(new GgufFile);
  f->name_ = name;
  Cursor c(bytes, f->name_);
  char magic[4];
  RETURN_IF_ERROR(c.Bytes(magic, 4, "magic"));
  if (std::memcmp(magic, "GGUF", 4) != 0) return c.Fail("magic", "not a GGUF file (no \"GGUF\")");
  ASSIGN_OR_RETURN(f->version_, c.Read<uint32_t>("version"));
  if (f->version_ != 2 && f->version_ != 3) {
    return c.Fail("version", absl::StrCat(f->version_, " is not 2 or 3"));
  }
  ASSIGN_OR_RETURN(const uint64_t num_tensors, c.Read<uint64_t>("tensor count"));
  ASSIGN_OR_RETURN(const uint64_t num_kv, c.Read<uint64_t>("metadata count"));
  if (num_tensors > kGgufMaxTensors) {
    return c.Fail("tensor count", absl::StrCat(num_tensors, " exceeds ", kGgufMaxTensors));
  }
  if (num_kv > kGgufMaxMetadata) {
    return c.Fail("metadata count", absl::StrCat(num_kv, " exceeds ", kGgufMaxMetadata));
  }
  for (uint64_t k = 0; k < num_kv; ++k) {
    ASSIGN_OR_RETURN(std::string key, c.String(absl::StrCat("metadata key ", k)));
    ASSIGN_OR_RETURN(const uint32_t type, c.Read<uint32_t>("value type of " + key));
    ASSIGN_OR_RETURN(GgufValue v, ReadValue(c, type, key, 0));
    if (!f->metadata_.emplace(key, std::move(v)).second) return c.Fail(key, "appears twice");
  }
  uint64_t alignment = kDefaultAlignment;
  if (f->Has("general.alignment")) {
    ASSIGN_OR_RETURN(alignment, f->GetUint("general.alignment"));
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (1u << 16)) {
      return c.Fail("general.alignment",
                    absl::StrCat(alignment, " is not a power of two <= 65536"));
    }
  }
  for (uint64_t t = 0; t < num_tensors; ++t) {
    GgufTensor ti;
    ASSIGN_OR_RETURN(ti.name, c.String(absl::StrCat("tensor ", t, " name")));
    const std::string field = absl::StrCat("tensor ", ti.name);
    ASSIGN_OR_RETURN(const uint32_t ndims, c.Read<uint32_t>(field + " dims"));
    if (ndims < 1 || ndims > kGgufMaxDims) {
      return c.Fail(field, absl::StrCat(ndims, " dimensions; 1 to ", kGgufMaxDims, " allowed"));
    }
    uint64_t elements = 1;
    for (uint32_t d = 0; d < ndims; ++d) {
      ASSIGN_OR_RETURN(const uint64_t n, c.Read<uint64_t>(field + " dim"));
      if (n == 0 || n > (uint64_t{1} << 40) || elements > (uint64_t{1} << 40) / n) {
        return c.Fail(field, absl::StrCat("dimension ", d, " of ", n, " is 0 or too large"));
      }
      elements *= n;
      ti.dims.push_back(static_cast<int64_t>(n));
    }
    ASSIGN_OR_RETURN(ti.type, c.Read<uint32_t>(field + " type"));
    ASSIGN_OR_RETURN(ti.offset, c.Read<uint64_t>(field + " offset"));
    const GgmlTypeInfo type = GgmlTypeOf(ti.type);
    if (type.name == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(name, ": ", field, " is ", GgmlTypeName(ti.type), " (ggml type ", ti.type,
                       "); Saturn reads f32, f16, bf16, q8_0, q4_0, q4_K and q6_K"));
    }
    if (ti.dims[0] % type.block_values != 0) {
      return c.Fail(field, absl::StrCat("rows of ", ti.dims[0], " values are not whole ", type.name,
                                        " blocks of ", type.block_values));
    }
    ti.bytes = static_cast<size_t>(elements / type.block_values * type.block_bytes);
    if (ti.offset % alignment != 0) {
      return c.Fail(field, absl::StrCat("offset ", ti.offset, " is not aligned to ", alignment));
    }
    if (!f->by_name_.emplace(ti.name, f->tensors_.size()).second) {
      return c.Fail(field, "appears twice");
    }
    f->tensors_.push_back(std::move(ti));
  }
  const uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  if (data_start > bytes.size()) {
    return c.Fail("tensor data", "the file ends before its data section");
  }
  const uint64_t data_bytes = bytes.size() - data_start;
  for (const GgufTensor& t : f->tensors_) {
    if (t.offset > data_bytes || t.bytes > data_bytes - t.offset) {
      return c.Fail("tensor " + t.name,
                    absl::StrCat(t.bytes, " bytes at data offset ", t.offset, " end past the ",
                                 data_bytes, " bytes of tensor data (truncated?)"));
    }
  }
  f->data_ = bytes.data() + data_start;
  return f;
}

const GgufTensor* GgufFile::FindTensor(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

absl::Span<const uint8_t> GgufFile::Data(const GgufTensor& t) const {
  return absl::MakeConstSpan(data_ + t.offset, t.bytes);
}

absl::StatusOr<uint64_t> GgufFile::GetUint(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return absl::NotFoundError(absl::StrCat(name_, ": no ", key));
  const GgufValue& v = it->second;
  if (v.kind == GgufValue::Kind::kUint) return v.u;
  if (v.kind == GgufValue::Kind::kInt && v.i >= 0) return static_cast<uint64_t>(v.i);
  return absl::InvalidArgumentError(absl::StrCat(name_, ": ", key, " is not an integer >= 0"));
}

absl::StatusOr<double> GgufFile::GetFloat(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return absl::NotFoundError(absl::StrCat(name_, ": no ", key));
  const GgufValue& v = it->second;
  if (v.kind == GgufValue::Kind::kFloat) return v.f;
  if (v.kind == GgufValue::Kind::kUint) return static_cast<double>(v.u);
  if (v.kind == GgufValue::Kind::kInt) return static_cast<double>(v.i);
  return absl::InvalidArgumentError(absl::StrCat(name_, ": ", key, " is not a number"));
}

absl::StatusOr<std::string> GgufFile::GetString(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return absl::NotFoundError(absl::StrCat(name_, ": no ", key));
  if (it->second.kind != GgufValue::Kind::kString) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": ", key, " is not a string"));
  }
  return it->second.s;
}

}  // namespace saturn
