// Tests for engine/model/safetensors.h: F32/BF16/F16 round trips (rounding, subnormals, inf, nan)
// and that every malformed file is an error naming the file or tensor, never a crash.
#include "engine/model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>

namespace saturn {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "safetensors_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes a file with a hand-made header (padded to 8 bytes) and `data_bytes` zero bytes.
  std::string WriteRaw(const std::string& name, std::string header, size_t data_bytes) {
    header.append((8 - header.size() % 8) % 8, ' ');
    return WriteRawWithLength(name, header, header.size(), data_bytes);
  }
  std::string WriteRawWithLength(const std::string& name, const std::string& header,
                                 uint64_t length, size_t data_bytes) {
    std::string path = Path(name);
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(length >> (8 * i)));
    out << header << std::string(data_bytes, '\0');
    return path;
  }

  fs::path dir_;
};

std::vector<float> RandomValues(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

TEST_F(SafetensorsTest, RoundTripAllDtypes) {
  const auto a = RandomValues(6 * 7, 1), b = RandomValues(5, 2), c = RandomValues(64, 3);
  const std::string path = Path("rt.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"a", "F32", {6, 7}, a},
                                      {"b.bf16", "BF16", {5}, b},
                                      {"c", "F16", {4, 4, 4}, c},
                                      {"empty", "F32", {0, 3}, {}}})
                  .ok());
  // The header length is a multiple of 8 so the data section is aligned.
  std::ifstream in(path, std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  EXPECT_EQ(len % 8, 0u);

  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->tensors().at("a").shape, (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(f->tensors().at("b.bf16").dtype, "BF16");
  EXPECT_EQ(f->tensors().at("c").shape, (std::vector<int64_t>{4, 4, 4}));

  auto ra = f->ReadF32("a");
  ASSERT_TRUE(ra.ok()) << ra.status();
  EXPECT_EQ(*ra, a);  // bit-exact
  auto rb = f->ReadF32("b.bf16");
  ASSERT_TRUE(rb.ok()) << rb.status();
  for (size_t i = 0; i < b.size(); ++i) EXPECT_NEAR((*rb)[i], b[i], std::abs(b[i]) / 256) << i;
  auto rc = f->ReadF32("c");
  ASSERT_TRUE(rc.ok()) << rc.status();
  for (size_t i = 0; i < c.size(); ++i) EXPECT_NEAR((*rc)[i], c[i], std::abs(c[i]) / 2048) << i;
  auto re = f->ReadF32("empty");
  ASSERT_TRUE(re.ok()) << re.status();
  EXPECT_TRUE(re->empty());
}

TEST_F(SafetensorsTest, HalfPrecisionSpecialValuesAndTies) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    float in, want;
  };
  const Case cases[] = {
      {0.0f, 0.0f},
      {-0.0f, -0.0f},
      {inf, inf},
      {-inf, -inf},
      {nan, nan},
      {65504.0f, 65504.0f},                            // f16 max
      {65519.0f, 65504.0f},                            // below the tie: down
      {65520.0f, inf},                                 // the tie rounds to even: inf
      {1e6f, inf},                                     // overflow
      {std::ldexp(1.0f, -24), std::ldexp(1.0f, -24)},  // smallest subnormal
      {std::ldexp(3.0f, -24), std::ldexp(3.0f, -24)},  // a subnormal
      {std::ldexp(1.0f, -25), 0.0f},                   // tie between 0 and 2^-24: 0
      {std::ldexp(3.0f, -25), std::ldexp(1.0f, -23)},  // tie: even
      {std::ldexp(1.0f, -14), std::ldexp(1.0f, -14)},  // smallest normal
      {1.0f + std::ldexp(1.0f, -11), 1.0f},            // tie: even
      {1.0f + 3 * std::ldexp(1.0f, -11), 1.0f + std::ldexp(1.0f, -9)},  // tie: even
      {-2.5f, -2.5f},
  };
  std::vector<float> in, want;
  for (const Case& c : cases) in.push_back(c.in), want.push_back(c.want);
  const std::string path = Path("f16.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"h", "F16", {int64_t(in.size())}, in}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  auto got = f->ReadF32("h");
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan((*got)[i])) << i;
    } else {
      EXPECT_EQ((*got)[i], want[i]) << i;
      EXPECT_EQ(std::signbit((*got)[i]), std::signbit(want[i])) << i;
    }
  }
}

// Every f16 bit pattern survives read (to f32) then write (back to f16), except that NaNs only
// need to stay NaN.
TEST_F(SafetensorsTest, EveryF16BitPatternRoundTrips) {
  const std::string header =
      R"({"h": {"dtype": "F16", "shape": [65536], "data_offsets": [0, 131072]}})";
  const std::string raw = WriteRaw("all_f16.st", header, 0);
  {
    std::ofstream out(raw, std::ios::binary | std::ios::app);
    for (uint32_t b = 0; b < 65536; ++b) out.put(char(b & 0xff)).put(char(b >> 8));
  }
  auto f = SafetensorsFile::Open(raw);
  ASSERT_TRUE(f.ok()) << f.status();
  auto values = f->ReadF32("h");
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0x0001], std::ldexp(1.0f, -24));
  EXPECT_EQ((*values)[0x3c00], 1.0f);
  EXPECT_EQ((*values)[0xfbff], -65504.0f);
  const std::string again = Path("again.st");
  ASSERT_TRUE(WriteSafetensors(again, {{"h", "F16", {65536}, *values}}).ok());
  std::ifstream in(again, std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  in.seekg(8 + len);
  std::vector<uint16_t> bits(65536);
  in.read(reinterpret_cast<char*>(bits.data()), 131072);
  ASSERT_TRUE(in);
  for (uint32_t b = 0; b < 65536; ++b) {
    const bool nan = (b & 0x7c00) == 0x7c00 && (b & 0x3ff) != 0;
    if (nan) {
      ASSERT_TRUE(std::isnan((*values)[b])) << b;
      ASSERT_EQ(bits[b] & 0x7c00, 0x7c00) << b;
      ASSERT_NE(bits[b] & 0x3ff, 0) << b;
    } else {
      ASSERT_EQ(bits[b], b) << b;
    }
  }
}

TEST_F(SafetensorsTest, Bf16RoundsToNearestEven) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> in = {1.0f + std::ldexp(1.0f, -8),
                                 1.0f + 3 * std::ldexp(1.0f, -8),
                                 1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20),
                                 nan,
                                 std::numeric_limits<float>::max(),
                                 -3.0f};
  const std::string path = Path("bf16.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"x", "BF16", {6}, in}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  auto got = f->ReadF32("x");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0], 1.0f);
  EXPECT_EQ((*got)[1], 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ((*got)[2], 1.0f + std::ldexp(1.0f, -7));  // above the tie: rounds up
  EXPECT_TRUE(std::isnan((*got)[3]));
  EXPECT_TRUE(std::isinf((*got)[4]));
  EXPECT_EQ((*got)[5], -3.0f);
}

TEST_F(SafetensorsTest, MetadataIsSkipped) {
  const std::string path = WriteRaw(
      "meta.safetensors",
      R"({"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
      8);
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->tensors().size(), 1u);
  auto w = f->ReadF32("w");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(*w, (std::vector<float>{0.0f, 0.0f}));
}

TEST_F(SafetensorsTest, TruncatedFileNamesTheTensor) {
  const std::string path = Path("trunc.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"first", "F32", {4}, RandomValues(4, 1)},
                                      {"last", "F32", {16}, RandomValues(16, 2)}})
                  .ok());
  fs::resize_file(path, fs::file_size(path) - 5);
  auto f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("truncated"));
  EXPECT_THAT(f.status().message(), HasSubstr("last"));
  EXPECT_THAT(f.status().message(), HasSubstr(path));
}

TEST_F(SafetensorsTest, MalformedHeadersAreErrors) {
  const std::string ok_header = R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  struct Case {
    std::string path;
    const char* expect;
  };
  const Case cases[] = {
      {WriteRawWithLength("len_too_big.st", ok_header, 4096, 8), "truncated"},
      {WriteRawWithLength("len_absurd.st", ok_header, uint64_t{1} << 40, 8), "100 MB"},
      {WriteRaw("garbage.st", "{this is not json", 8), "JSON"},
      {WriteRaw("not_object.st", "[1, 2, 3]", 8), "object"},
      {WriteRaw("unknown_dtype.st",
                R"({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 2]}})", 2),
       "unknown dtype Q4"},
      {WriteRaw("offsets.st", R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})",
                8),
       "shape implies 12"},
      {WriteRaw("reversed.st", R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})",
                8),
       "data_offsets"},
      {WriteRaw("beyond.st", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                8),
       "truncated"},
      {WriteRaw("bad_shape.st", R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})",
                8),
       "shape"},
      {WriteRaw("no_offsets.st", R"({"w": {"dtype": "F32", "shape": [2]}})", 8), "data_offsets"},
      // Two tensors over the same bytes loaded as one (v_proj read k_proj's weights).
      {WriteRaw("aliased.st",
                R"({"k": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    "v": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                8),
       "tensors k and v overlap"},
      // The reference reader refuses what does not cover the data end to end.
      {WriteRaw("gap.st",
                R"({"k": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                    "v": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                12),
       "bytes [4, 8) of the data section, before tensor v, belong to no tensor"},
      {WriteRaw("twice.st",
                R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                    "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                8),
       "is one listed twice?"},
      {WriteRaw("trailing.st", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                12),
       "the data section has 12 bytes but its tensors end at byte 8"},
      {WriteRaw("deep.st", std::string(1000, '[') + std::string(1000, ']'), 8),
       "nests arrays and objects 1000 deep"},
  };
  for (const Case& c : cases) {
    auto f = SafetensorsFile::Open(c.path);
    ASSERT_FALSE(f.ok()) << c.path;
    EXPECT_THAT(f.status().message(), HasSubstr(c.expect)) << c.path;
    EXPECT_THAT(f.status().message(), HasSubstr(c.path));
  }
}

TEST_F(SafetensorsTest, TinyAndMissingFilesAreErrors) {
  {
    std::ofstream out(Path("short.st"), std::ios::binary);
    out << "abc";
  }
  EXPECT_FALSE(SafetensorsFile::Open(Path("short.st")).ok());
  auto missing = SafetensorsFile::Open(Path("does_not_exist.st"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, UnsupportedDtypeAndMissingTensorOnRead) {
  const std::string path = WriteRaw("ints.st",
                                    R"({"i": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]},
          "d": {"dtype": "F64", "shape": [1], "data_offsets": [4, 12]}})",
                                    12);
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  auto i8 = f->ReadF32("i");
  ASSERT_FALSE(i8.ok());
  EXPECT_THAT(i8.status().message(),
              HasSubstr("tensor i has unsupported dtype I8 (supported: F32, BF16, F16)"));
  auto f64 = f->ReadF32("d");
  ASSERT_FALSE(f64.ok());
  EXPECT_THAT(f64.status().message(), HasSubstr("F64"));
  auto none = f->ReadF32("nope");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("nope"));
}

TEST_F(SafetensorsTest, FileShrunkAfterOpenIsAnError) {
  const std::string path = Path("shrink.st");
  ASSERT_TRUE(WriteSafetensors(path, {{"w", "F32", {1024}, RandomValues(1024, 4)}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  fs::resize_file(path, fs::file_size(path) - 100);
  auto w = f->ReadF32("w");
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr("truncated"));
}

TEST_F(SafetensorsTest, WriteRejectsBadInput) {
  EXPECT_FALSE(WriteSafetensors(Path("a.st"), {{"w", "F32", {3}, {1.0f, 2.0f}}}).ok());
  EXPECT_FALSE(WriteSafetensors(Path("b.st"), {{"w", "I8", {1}, {1.0f}}}).ok());
  EXPECT_FALSE(
      WriteSafetensors(Path("c.st"), {{"w", "F32", {1}, {1.0f}}, {"w", "F32", {1}, {2.0f}}}).ok());
  EXPECT_FALSE(WriteSafetensors((dir_ / "no_such_dir" / "d.st").string(), {}).ok());
}

}  // namespace
}  // namespace saturn
