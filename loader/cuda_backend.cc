// The CUDA backend (see backend.h): pinned staging, device buffers, a side stream and
// two events per slot. Only the CUDA runtime API is used (no kernels), so this is a
// plain C++ file linked to cudart; it is compiled only when the toolkit is found.
#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>

#include <string>

#include "loader/backend.h"

namespace epochfs::loader {
namespace {

std::string CudaError(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

Status CudaStatus(cudaError_t err, const std::string& context) {
  cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  Code code = err == cudaErrorMemoryAllocation ? Code::kNoMemory : Code::kDeviceError;
  return Status(code, context + ": " + CudaError(err),
                err == cudaErrorMemoryAllocation ? ENOMEM : EIO);
}

// Makes `device` current for the scope and restores the caller's device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceGuard() {
    int now = -1;
    if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_) {
      cudaSetDevice(previous_);
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

class CudaSlot final : public SlotMemory {
 public:
  explicit CudaSlot(int device) : device_(device) {}
  ~CudaSlot() override {
    DeviceGuard guard(device_);
    // Errors here are ignored on purpose: at process exit the runtime may already be
    // unloading, and there is nobody left to tell.
    if (ready != nullptr) cudaEventSynchronize(ready);
    if (released != nullptr) cudaEventSynchronize(released);
    if (data != nullptr) cudaFree(data);
    if (host != nullptr) cudaFreeHost(host);
    if (ready != nullptr) cudaEventDestroy(ready);
    if (released != nullptr) cudaEventDestroy(released);
    if (accounted_) AddLiveBufferBytes(-2 * static_cast<ptrdiff_t>(bytes));
    cudaGetLastError();
  }
  void Account() {
    accounted_ = true;
    AddLiveBufferBytes(2 * static_cast<ptrdiff_t>(bytes));
  }

  cudaEvent_t ready = nullptr;     // recorded on the copy stream after the copy
  cudaEvent_t released = nullptr;  // recorded on the consumer's stream at release

 private:
  int device_;
  bool accounted_ = false;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~CudaBackend() override {
    DeviceGuard guard(device_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    cudaGetLastError();
  }

  bool on_device() const override { return true; }
  int device_id() const override { return device_; }

  Result<std::unique_ptr<SlotMemory>> Allocate(size_t bytes, size_t index, size_t count) override {
    DeviceGuard guard(device_);
    size_t n = bytes == 0 ? 1 : bytes;
    const std::string what = "batch buffer " + std::to_string(index + 1) + " of " +
                             std::to_string(count) + " (" + std::to_string(n) + " bytes)";
    auto slot = std::make_unique<CudaSlot>(device_);
    slot->bytes = n;
    void* p = nullptr;
    // Device first: running out of device memory is the likely failure; say so.
    cudaError_t err = cudaMalloc(&p, n);
    if (err != cudaSuccess) {
      return CudaStatus(err,
                        "cuda:" + std::to_string(device_) + ": cannot allocate device " + what);
    }
    slot->data = static_cast<uint8_t*>(p);
    err = cudaHostAlloc(&p, n, cudaHostAllocDefault);
    if (err != cudaSuccess) return CudaStatus(err, "cannot allocate pinned host " + what);
    slot->host = static_cast<uint8_t*>(p);
    err = cudaEventCreateWithFlags(&slot->ready, cudaEventDisableTiming);
    if (err != cudaSuccess) return CudaStatus(err, "cudaEventCreate");
    err = cudaEventCreateWithFlags(&slot->released, cudaEventDisableTiming);
    if (err != cudaSuccess) return CudaStatus(err, "cudaEventCreate");
    slot->Account();
    return std::unique_ptr<SlotMemory>(std::move(slot));
  }

  Status BeginFill(SlotMemory& mem) override {
    auto& slot = static_cast<CudaSlot&>(mem);
    DeviceGuard guard(device_);
    cudaError_t err = cudaEventSynchronize(slot.ready);  // the last copy out of `host`
    if (err != cudaSuccess) return CudaStatus(err, "cudaEventSynchronize(copy done)");
    return Status::Ok();
  }

  Status EndFill(SlotMemory& mem, size_t bytes) override {
    auto& slot = static_cast<CudaSlot&>(mem);
    DeviceGuard guard(device_);
    // The consumer's last use of `data` must be done before it is overwritten.
    cudaError_t err = cudaStreamWaitEvent(stream_, slot.released, 0);
    if (err != cudaSuccess) return CudaStatus(err, "cudaStreamWaitEvent(released)");
    err = cudaMemcpyAsync(slot.data, slot.host, bytes, cudaMemcpyHostToDevice, stream_);
    if (err != cudaSuccess) {
      return CudaStatus(err, "cudaMemcpyAsync of " + std::to_string(bytes) +
                                 " bytes to cuda:" + std::to_string(device_));
    }
    err = cudaEventRecord(slot.ready, stream_);
    if (err != cudaSuccess) return CudaStatus(err, "cudaEventRecord(ready)");
    return Status::Ok();
  }

  Status WaitReady(SlotMemory& mem, void* stream) override {
    auto& slot = static_cast<CudaSlot&>(mem);
    DeviceGuard guard(device_);
    cudaError_t err = cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), slot.ready, 0);
    if (err != cudaSuccess) return CudaStatus(err, "cudaStreamWaitEvent(consumer stream)");
    return Status::Ok();
  }

  void MarkReleased(SlotMemory& mem, void* stream) override {
    auto& slot = static_cast<CudaSlot&>(mem);
    DeviceGuard guard(device_);
    cudaError_t err = cudaEventRecord(slot.released, static_cast<cudaStream_t>(stream));
    if (err != cudaSuccess) {
      // Fall back to the strictest order: the next copy then waits for the whole device.
      spdlog::debug("epochfs loader: cudaEventRecord(released): {}", CudaError(err));
      cudaGetLastError();
      cudaDeviceSynchronize();
      cudaGetLastError();
    }
  }

 private:
  int device_;
  cudaStream_t stream_;
};

}  // namespace

bool CudaDeviceUsable(std::string* why_not) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    *why_not = "cudaGetDeviceCount: " + CudaError(err);
    return false;
  }
  if (count == 0) {
    *why_not = "no CUDA device";
    return false;
  }
  return true;
}

Result<std::unique_ptr<Backend>> NewCudaBackend(int cuda_device) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return CudaStatus(err, "cudaGetDeviceCount");
  if (cuda_device < 0 || cuda_device >= count) {
    return Status(Code::kInvalidArgument,
                  "cuda_device " + std::to_string(cuda_device) + " is not one of the " +
                      std::to_string(count) + " CUDA devices",
                  EINVAL);
  }
  DeviceGuard guard(cuda_device);
  cudaStream_t stream = nullptr;
  // Non-blocking: the copies must not serialise with the legacy default stream.
  err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (err != cudaSuccess)
    return CudaStatus(err, "cudaStreamCreate on cuda:" + std::to_string(cuda_device));
  return std::unique_ptr<Backend>(new CudaBackend(cuda_device, stream));
}

}  // namespace epochfs::loader
