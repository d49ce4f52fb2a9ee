// SATURN_TARGET_PUSH("avx2,fma") ... SATURN_TARGET_POP: the functions defined between the two
// are compiled for those instruction sets whatever the file's -m flags (clang's attribute
// push, GCC's push_options and target), so one binary carries every level's kernels and picks
// one at run time (isa_kernels.h: KernelsFor). Include after the intrinsics headers.
#pragma once

#define SATURN_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define SATURN_TARGET_PUSH(isa) \
  SATURN_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define SATURN_TARGET_POP SATURN_PRAGMA(clang attribute pop)
#else
#define SATURN_TARGET_PUSH(isa) SATURN_PRAGMA(GCC push_options) SATURN_PRAGMA(GCC target(isa))
#define SATURN_TARGET_POP SATURN_PRAGMA(GCC pop_options)
#endif
