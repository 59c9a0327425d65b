// Backend: where batch buffers live and how a filled batch reaches the consumer.
// Private to loader/; CUDA types stay in cuda_backend.cc.
//
// A slot has a staging buffer the reader fills (`host`) and the buffer the consumer sees
// (`data`): the same host memory on the host backend; pinned host memory and a device
// buffer on CUDA, where EndFill() queues the copy on the backend's side stream and
// records the slot's ready event, WaitReady() makes the consumer's stream wait on it,
// and MarkReleased() records a release event on the consumer's stream that the next
// copy into the slot waits for.
//
// Thread-safety: BeginFill/EndFill are called by the reader thread, WaitReady by the
// consumer, MarkReleased by whichever thread drops the batch; they touch different
// slots, or the same slot at different points of its cycle (ordered by the ring's
// mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "loader/loader.h"

namespace epochfs::loader {

class SlotMemory {
 public:
  virtual ~SlotMemory() = default;
  uint8_t* host = nullptr;  // staging: what the reader writes
  uint8_t* data = nullptr;  // what the consumer reads (device memory on CUDA)
  size_t bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual bool on_device() const = 0;
  virtual int device_id() const = 0;  // -1 on the host
  // `index` of `count` is for the error message.
  virtual Result<std::unique_ptr<SlotMemory>> Allocate(size_t bytes, size_t index,
                                                       size_t count) = 0;
  // Before the reader overwrites slot.host: waits (host) for the last copy out of it.
  virtual Status BeginFill(SlotMemory& slot) = 0;
  // After slot.host holds `bytes` bytes: makes them visible at slot.data.
  virtual Status EndFill(SlotMemory& slot, size_t bytes) = 0;
  // Makes `stream` (cudaStream_t, nullptr = legacy default) wait until slot.data is ready.
  virtual Status WaitReady(SlotMemory& slot, void* stream) = 0;
  // The consumer let go of the slot; work queued on `stream` may still read slot.data.
  virtual void MarkReleased(SlotMemory& slot, void* stream) = 0;
};

// Host buffers (anonymous mmap, so a failed huge allocation is a clean ENOMEM).
std::unique_ptr<Backend> NewHostBackend();
// kCpu: host. kCuda: CUDA or kUnsupported saying why. kAuto: CUDA when usable, else host
// (logged once per process).
Result<std::unique_ptr<Backend>> NewBackend(DeviceKind kind, int cuda_device);
// Whether this build has the CUDA path, and whether a device is usable (why not if not).
bool CudaCompiledIn();
bool CudaUsable(std::string* why_not);

// Bytes of slot buffers alive in this process, host and device (for leak tests).
size_t LiveBufferBytes();
void AddLiveBufferBytes(ptrdiff_t delta);

#ifdef EPOCHFS_LOADER_HAVE_CUDA
Result<std::unique_ptr<Backend>> NewCudaBackend(int cuda_device);
bool CudaDeviceUsable(std::string* why_not);
#endif

}  // namespace epochfs::loader
