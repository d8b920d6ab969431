// What every CUDA source of this package shares: the integer types the kernels use and, where a source
// is compiled as C by the host compiler (tests/codecs/test_kernels_c.py, tests/codecs/test_zstd_c.py), C stand-ins
// for the CUDA qualifiers and built-in types its device functions use. NVRTC and nvcc define
// __CUDACC__; the host compiler does not. Each kernel's __global__ wrapper is CUDA only (the host
// tests call its device function), so each source puts its wrappers under #ifdef __CUDACC__.
//
// gpu/kernels.py inlines this file where a source includes it before NVRTC compiles the source, so
// that cupy's kernel cache, keyed on the code it is given, sees an edit here.

#ifndef ZARR_DASK_GPU_COMMON_CUH
#define ZARR_DASK_GPU_COMMON_CUH

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#ifdef __CUDACC__
#define ZDG_STATIC_ASSERT(cond, why) static_assert(cond, why)
#else  // the host compiler, as C
#define ZDG_STATIC_ASSERT(cond, why) _Static_assert(cond, why)
#include <stdbool.h>
#define __device__
#define __forceinline__ static inline
#define __constant__
typedef struct { unsigned x, y, z, w; } uint4;
#endif

#endif
