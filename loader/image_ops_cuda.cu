// The CUDA side of image_ops.h: one kernel for a whole batch, a thread per output pixel.
#include <cuda_runtime.h>

#include <string>

#include "loader/image_ops.h"
#include "loader/loader.h"
#include "loader/image_ops_pixel.h"

namespace epochfs::loader {
namespace {

__global__ void ResizeNormalizeKernel(const ResizeJob* jobs, int32_t size, NormalizeParams params,
                                      PixelType type, uint8_t* out) {
  const int32_t b = blockIdx.y;
  const int32_t p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= size * size) return;
  const int32_t y = p / size, x = p % size;
  const size_t value_bytes = type == PixelType::kFloat32 ? 4 : 2;
  const size_t at = ((static_cast<size_t>(b) * size + y) * size + x) * 3 * value_bytes;
  pixel::Compute(jobs[b], y, x, size, params, type, out + at);
}

Status CudaError(cudaError_t err, const char* what) {
  return Status(Code::kDeviceError, std::string(what) + ": " + cudaGetErrorString(err), EIO);
}

}  // namespace

Status ResizeNormalizeCuda(const ResizeJob* jobs, size_t count, int32_t size,
                           const NormalizeParams& params, PixelType type, void* out,
                           void* stream_handle) {
  EPOCHFS_LOADER_RETURN_IF_ERROR(CheckResizeJobs(jobs, count, size));
  if (count == 0) return Status::Ok();
  auto stream = static_cast<cudaStream_t>(stream_handle);
  // The jobs go to the device in stream order: allocated, copied (from pageable memory,
  // so staged before the call returns), used and freed on the caller's stream.
  void* device_jobs = nullptr;
  cudaError_t err = cudaMallocAsync(&device_jobs, count * sizeof(ResizeJob), stream);
  if (err != cudaSuccess) return CudaError(err, "cudaMallocAsync(resize jobs)");
  err = cudaMemcpyAsync(device_jobs, jobs, count * sizeof(ResizeJob), cudaMemcpyHostToDevice,
                        stream);
  if (err == cudaSuccess) {
    const int threads = 256;
    const dim3 grid((size * size + threads - 1) / threads, static_cast<unsigned>(count));
    ResizeNormalizeKernel<<<grid, threads, 0, stream>>>(static_cast<const ResizeJob*>(device_jobs),
                                                        size, params, type,
                                                        static_cast<uint8_t*>(out));
    err = cudaGetLastError();
  }
  const cudaError_t freed = cudaFreeAsync(device_jobs, stream);
  if (err != cudaSuccess) return CudaError(err, "resize kernel");
  if (freed != cudaSuccess) return CudaError(freed, "cudaFreeAsync(resize jobs)");
  return Status::Ok();
}

}  // namespace epochfs::loader
