// The rule that picks a memory-bound CUDA kernel's 16-byte vector path (kernels/cuda/
// vector_access.h): whole vectors per row and 16-byte aligned pointers, else the scalar path.
// Host-only: the rule is plain arithmetic, checked before every launch.
#include <gtest/gtest.h>

#include "kernels/cuda/vector_access.h"

namespace saturn::gpu {
namespace {

TEST(VectorAccessTest, WholeVectorsAndAlignedPointersOnly) {
  alignas(16) static char buf[256];
  const void* aligned = buf;
  const void* off2 = buf + 2;    // a bf16 view one element in
  const void* off16 = buf + 16;  // still aligned
  // bf16 (2 bytes): 8 per vector.
  EXPECT_TRUE(CanVectorize(2048, 2, {aligned, off16}));
  EXPECT_TRUE(CanVectorize(8, 2, {aligned}));
  EXPECT_FALSE(CanVectorize(12, 2, {aligned}));  // 24 bytes: rows after the first misalign
  EXPECT_FALSE(CanVectorize(2048, 2, {aligned, off2}));
  // f32 (4 bytes): 4 per vector.
  EXPECT_TRUE(CanVectorize(4, 4, {aligned}));
  EXPECT_FALSE(CanVectorize(6, 4, {aligned}));
  // Degenerate shapes never vectorize.
  EXPECT_FALSE(CanVectorize(0, 2, {aligned}));
  EXPECT_FALSE(CanVectorize(-8, 2, {aligned}));
  EXPECT_FALSE(CanVectorize(8, 0, {aligned}));
  EXPECT_TRUE(CanVectorize(8, 2, {}));
}

}  // namespace
}  // namespace saturn::gpu
