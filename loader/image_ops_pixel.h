// One output pixel of ResizeNormalize (image_ops.h), shared by the host loop and the CUDA
// kernel so that both compute exactly the same thing. Private to loader/.
#pragma once

#include <cstdint>

#include "loader/image_ops.h"

#ifdef __CUDACC__
#define EPOCHFS_HOST_DEVICE __host__ __device__
#else
#define EPOCHFS_HOST_DEVICE
#endif

namespace epochfs::loader::pixel {

// PyTorch's antialiased bilinear window along one axis (aten's
// _compute_indices_min_size_weights_aa): the input range [*first, *first + *count) that
// output index `i` reads, for an input of `in` and an output of `out` samples.
struct Axis {
  float center, support, invscale;
  int32_t first, count;
};

EPOCHFS_HOST_DEVICE inline Axis AxisWindow(int32_t i, int32_t in, int32_t out) {
  Axis a;
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  a.support = scale >= 1.0f ? scale : 1.0f;  // bilinear: half of an interpolation size of 2
  a.invscale = scale >= 1.0f ? 1.0f / scale : 1.0f;
  a.center = scale * (static_cast<float>(i) + 0.5f);
  int32_t lo = static_cast<int32_t>(a.center - a.support + 0.5f);  // truncates, as aten's cast
  if (lo < 0) lo = 0;
  int32_t hi = static_cast<int32_t>(a.center + a.support + 0.5f);
  if (hi > in) hi = in;
  a.first = lo;
  a.count = hi - lo;
  return a;
}

EPOCHFS_HOST_DEVICE inline float Weight(const Axis& a, int32_t j) {
  const float x = (static_cast<float>(j + a.first) - a.center + 0.5f) * a.invscale;
  const float ax = x < 0 ? -x : x;
  return ax < 1.0f ? 1.0f - ax : 0.0f;
}

EPOCHFS_HOST_DEVICE inline uint16_t ToBFloat16Bits(float v) {
  uint32_t bits;
#ifdef __CUDA_ARCH__
  bits = __float_as_uint(v);
#else
  __builtin_memcpy(&bits, &v, sizeof(bits));
#endif
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN stays NaN
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(bits >> 16);
}

// Output pixel (oy, ox) of `job`, its three channels written at `dst` (3 values of `type`).
EPOCHFS_HOST_DEVICE inline void Compute(const ResizeJob& job, int32_t oy, int32_t ox,
                                        int32_t size, const NormalizeParams& p, PixelType type,
                                        void* dst) {
  const int32_t x_out = job.flip ? size - 1 - ox : ox;
  const Axis ay = AxisWindow(oy + job.window_top, job.region_height, job.resized_height);
  const Axis ax = AxisWindow(x_out + job.window_left, job.region_width, job.resized_width);
  float wy_total = 0, wx_total = 0;
  for (int32_t j = 0; j < ay.count; ++j) wy_total += Weight(ay, j);
  for (int32_t j = 0; j < ax.count; ++j) wx_total += Weight(ax, j);
  const float norm = (wy_total > 0 && wx_total > 0) ? 1.0f / (wy_total * wx_total) : 0.0f;
  const int64_t plane = static_cast<int64_t>(job.height) * job.width;
  float acc[3] = {0, 0, 0};
  for (int32_t jy = 0; jy < ay.count; ++jy) {
    const float wy = Weight(ay, jy);
    if (wy == 0) continue;
    const int64_t row = static_cast<int64_t>(job.region_top + ay.first + jy) * job.width +
                        job.region_left + ax.first;
    for (int32_t jx = 0; jx < ax.count; ++jx) {
      const float w = wy * Weight(ax, jx);
      acc[0] += w * job.src[row + jx];
      acc[1] += w * job.src[plane + row + jx];
      acc[2] += w * job.src[2 * plane + row + jx];
    }
  }
  for (int c = 0; c < 3; ++c) {
    const float v = (acc[c] * norm - p.mean[c]) * p.inv_std[c];
    if (type == PixelType::kFloat32) {
      static_cast<float*>(dst)[c] = v;
    } else {
      static_cast<uint16_t*>(dst)[c] = ToBFloat16Bits(v);
    }
  }
}

}  // namespace epochfs::loader::pixel
