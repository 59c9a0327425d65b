// The host side of image_ops.h: job checks and the host loop.
#include "loader/image_ops.h"
#include "loader/loader.h"

#include <string>

#include "loader/image_ops_pixel.h"

namespace epochfs::loader {

Status CheckResizeJobs(const ResizeJob* jobs, size_t count, int32_t size) {
  auto bad = [](size_t i, const std::string& what) {
    return Status(Code::kInvalidArgument, "image " + std::to_string(i) + ": " + what, EINVAL);
  };
  if (size <= 0) return Status(Code::kInvalidArgument, "output size must be positive", EINVAL);
  for (size_t i = 0; i < count; ++i) {
    const ResizeJob& j = jobs[i];
    if (j.src == nullptr || j.height <= 0 || j.width <= 0) return bad(i, "no pixels");
    if (j.region_top < 0 || j.region_left < 0 || j.region_height <= 0 || j.region_width <= 0 ||
        j.region_top + j.region_height > j.height || j.region_left + j.region_width > j.width) {
      return bad(i, "the region is not inside the image");
    }
    if (j.resized_height <= 0 || j.resized_width <= 0 || j.window_top < 0 || j.window_left < 0 ||
        j.window_top + size > j.resized_height || j.window_left + size > j.resized_width) {
      return bad(i, "the output window is not inside the resized image");
    }
  }
  return Status::Ok();
}

Status ResizeNormalizeHost(const ResizeJob* jobs, size_t count, int32_t size,
                           const NormalizeParams& params, PixelType type, void* out) {
  EPOCHFS_LOADER_RETURN_IF_ERROR(CheckResizeJobs(jobs, count, size));
  const size_t value_bytes = type == PixelType::kFloat32 ? 4 : 2;
  auto* base = static_cast<uint8_t*>(out);
  for (size_t b = 0; b < count; ++b) {
    for (int32_t y = 0; y < size; ++y) {
      for (int32_t x = 0; x < size; ++x) {
        const size_t at = ((b * size + y) * size + x) * 3 * value_bytes;
        pixel::Compute(jobs[b], y, x, size, params, type, base + at);
      }
    }
  }
  return Status::Ok();
}

#ifndef EPOCHFS_LOADER_HAVE_CUDA
Status ResizeNormalizeCuda(const ResizeJob*, size_t, int32_t, const NormalizeParams&, PixelType,
                           void*, void*) {
  return Status(Code::kUnsupported, "this build has no CUDA", ENOSYS);
}
#endif

}  // namespace epochfs::loader
