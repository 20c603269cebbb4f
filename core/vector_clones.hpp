// Compiles an element-wise loop for AVX-512 and AVX2 beside the baseline x86-64 build, picking one when the
// program loads (GCC's function multi-versioning). ddl is built for any x86-64, so without it such loops
// run on SSE2; the loader's pixel conversion ran 4x faster on AVX-512. Clang and other targets get the
// baseline build.
#pragma once

// Not under ThreadSanitizer: the clones' resolver runs while the program is loaded, before TSan's runtime
// is up, and crashed the test programs at start.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define DDL_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DDL_VECTOR_CLONES
#endif
