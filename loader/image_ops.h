// Image operations of the loader's image pipeline (loader/python/epochfs/images.py): crop,
// resize, flip and normalise a whole batch of decoded images in one pass, into one
// [batch, 3, size, size] tensor in channels_last memory layout.
//
// Why one pass: done image by image with torch operations, each image costs four
// kernel launches and their Python calls, and a batch of 256 spends more time launching
// than the GPU spends computing; one kernel for the batch costs one launch.
//
// The resize is PyTorch's antialiased bilinear one (torch.nn.functional.interpolate with
// mode="bilinear", align_corners=False, antialias=True, as torchvision's Resize and
// RandomResizedCrop apply it): for each output pixel, a triangle filter whose support
// widens with the downscaling factor, its weights normalised along each axis. Computed
// here as one two-dimensional weighted sum (the product of the two axes' weights), which
// equals PyTorch's two separable passes up to float rounding.
//
// Thread-safety: pure functions; the CUDA one runs on the caller's stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace epochfs::loader {

// One image of the batch: which part of it is resized to what, and which window of that
// resized image is the output.
//  - RandomResizedCrop: region = the crop box, resized = size x size, window at (0, 0);
//  - Resize(shorter side) + CenterCrop: region = the whole image, resized = the resized
//    image's size, window at the centre crop's corner.
struct ResizeJob {
  const uint8_t* src = nullptr;  // [3, height, width] uint8, plane by plane (CHW)
  int32_t height = 0, width = 0;
  int32_t region_top = 0, region_left = 0, region_height = 0, region_width = 0;
  int32_t resized_height = 0, resized_width = 0;
  int32_t window_top = 0, window_left = 0;
  int32_t flip = 0;  // mirror the output left to right
};

enum class PixelType { kFloat32, kBFloat16 };

struct NormalizeParams {
  float mean[3];     // subtracted from the 0-255 value
  float inv_std[3];  // then multiplied (1 / (std * 255) for ImageNet's std on 0-1 values)
};

// Checks every job against its image and the output size (kInvalidArgument naming it).
Status CheckResizeJobs(const ResizeJob* jobs, size_t count, int32_t size);

// Host memory: `out` holds count * size * size * 3 values of `type` (NHWC, which is a
// [count, 3, size, size] tensor in channels_last layout).
Status ResizeNormalizeHost(const ResizeJob* jobs, size_t count, int32_t size,
                           const NormalizeParams& params, PixelType type, void* out);

// Device memory (the job's `src` and `out`), queued on `stream` (a cudaStream_t; the
// call returns before the kernel has run). kUnsupported in a build without CUDA.
Status ResizeNormalizeCuda(const ResizeJob* jobs, size_t count, int32_t size,
                           const NormalizeParams& params, PixelType type, void* out,
                           void* stream);

}  // namespace epochfs::loader
