// Byte ranges of one device buffer copied into another in one launch (gpu/runtime/gather.py).

#include "common.cuh"

// range k: size[k] bytes from buf + src[k] to out + dst[k], by threads t, t + nt, ...
__device__ void copy_item(i64 k, i64 t, i64 nt, const u8* buf, const i64* src, const i64* dst, const i64* size, u8* out) {
    for (i64 b = t; b < size[k]; b += nt) out[dst[k] + b] = buf[src[k] + b];
}

#ifdef __CUDACC__  // the kernels; the host tests call the device functions above
extern "C" __global__ void copy_ranges(const u8* buf, const i64* src, const i64* dst, const i64* size, u8* out) {
    copy_item(blockIdx.x, threadIdx.x, blockDim.x, buf, src, dst, size, out);
}
#endif
