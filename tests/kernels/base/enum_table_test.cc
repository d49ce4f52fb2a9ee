// kernels/base/enum_table.h: EnumLookup reads the entry of each enumerator and answers the
// fallback for kCount and for values cast from integers outside the enum (negative ones
// included where the underlying type is signed); the kernels' own tables (op kinds, op
// classes, dtypes) name every enumerator, each name once.
#include "kernels/base/enum_table.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <set>
#include <string>

#include "kernels/op_record.h"
#include "kernels/tensor.h"

namespace saturn {
namespace {

enum class Signed : int { kA, kB, kCount };
enum class Small : uint8_t { kA, kB, kC, kCount };

constexpr std::array kSignedNames{"a", "b"};
constexpr std::array kSmallValues{10, 20, 30};

// The lookup is usable at compile time.
static_assert(EnumCount<Small>() == 3);
static_assert(EnumLookup(kSmallValues, Small::kC, -1) == 30);
static_assert(EnumLookup(kSmallValues, Small::kCount, -1) == -1);

TEST(EnumTableTest, ReadsEachEnumeratorsEntry) {
  EXPECT_STREQ(EnumLookup(kSignedNames, Signed::kA, "?"), "a");
  EXPECT_STREQ(EnumLookup(kSignedNames, Signed::kB, "?"), "b");
  EXPECT_EQ(EnumLookup(kSmallValues, Small::kA, -1), 10);
  EXPECT_EQ(EnumLookup(kSmallValues, Small::kB, -1), 20);
}

TEST(EnumTableTest, AnswersTheFallbackOutsideTheEnumerators) {
  EXPECT_STREQ(EnumLookup(kSignedNames, Signed::kCount, "?"), "?");
  EXPECT_STREQ(EnumLookup(kSignedNames, static_cast<Signed>(-1), "?"), "?");
  EXPECT_STREQ(EnumLookup(kSignedNames, static_cast<Signed>(1000), "none"), "none");
  EXPECT_EQ(EnumLookup(kSmallValues, static_cast<Small>(255), -1), -1);
}

TEST(EnumTableTest, KernelTablesNameEveryEnumeratorOnce) {
  std::set<std::string> kinds, classes, dtypes;
  for (size_t i = 0; i < EnumCount<OpKind>(); ++i) {
    kinds.insert(OpKindName(static_cast<OpKind>(i)));
  }
  for (size_t i = 0; i < EnumCount<OpClass>(); ++i) {
    classes.insert(OpClassName(static_cast<OpClass>(i)));
  }
  for (size_t i = 0; i < EnumCount<DType>(); ++i) {
    dtypes.insert(DTypeName(static_cast<DType>(i)));
  }
  EXPECT_EQ(kinds.size(), EnumCount<OpKind>());
  EXPECT_EQ(classes.size(), EnumCount<OpClass>());
  EXPECT_EQ(dtypes.size(), EnumCount<DType>());
  EXPECT_EQ(kinds.count("?") + classes.count("?") + dtypes.count("?"), 0u);
  EXPECT_STREQ(OpKindName(OpKind::kAddRmsNorm), "add_rms_norm");
  EXPECT_STREQ(OpKindName(OpKind::kCopy), "copy");
  EXPECT_STREQ(OpKindName(OpKind::kCount), "?");
  EXPECT_STREQ(OpClassName(OpClass::kElementwise), "elementwise");
  EXPECT_STREQ(OpClassName(OpClass::kCount), "?");
  EXPECT_STREQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_STREQ(DTypeName(DType::kCount), "?");
}

TEST(EnumTableTest, DTypeSizes) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kI32), 4u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
  EXPECT_EQ(DTypeSize(DType::kCount), 0u);
}

}  // namespace
}  // namespace saturn
