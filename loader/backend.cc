// The host backend and the backend factory (see backend.h).
#include "loader/backend.h"

#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

namespace epochfs::loader {
namespace {

std::atomic<size_t> g_live_bytes{0};

class HostSlot final : public SlotMemory {
 public:
  HostSlot(uint8_t* p, size_t n) {
    host = data = p;
    bytes = n;
    AddLiveBufferBytes(static_cast<ptrdiff_t>(n));
  }
  ~HostSlot() override {
    ::munmap(host, bytes);
    AddLiveBufferBytes(-static_cast<ptrdiff_t>(bytes));
  }
};

class HostBackend final : public Backend {
 public:
  bool on_device() const override { return false; }
  int device_id() const override { return -1; }

  Result<std::unique_ptr<SlotMemory>> Allocate(size_t bytes, size_t index, size_t count) override {
    size_t n = bytes == 0 ? 1 : bytes;
    // Where the kernel overcommits (vm.overcommit_memory=1, or a mapping below its
    // heuristic's limit), mmap grants more than the machine has, and the reader would be
    // killed filling it: a buffer no machine of this size can hold is refused here.
    const uint64_t physical = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                              static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    if (physical > 0 && n > physical) {
      return Status(Code::kNoMemory,
                    "host: cannot allocate batch buffer " + std::to_string(index + 1) + " of " +
                        std::to_string(count) + " (" + std::to_string(n) +
                        " bytes): more than this machine's " + std::to_string(physical) +
                        " bytes of memory",
                    ENOMEM);
    }
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      return Status(Code::kNoMemory,
                    "host: cannot allocate batch buffer " + std::to_string(index + 1) + " of " +
                        std::to_string(count) + " (" + std::to_string(n) +
                        " bytes): " + std::strerror(err),
                    err);
    }
    return std::unique_ptr<SlotMemory>(new HostSlot(static_cast<uint8_t*>(p), n));
  }
  Status BeginFill(SlotMemory&) override { return Status::Ok(); }
  Status EndFill(SlotMemory&, size_t) override { return Status::Ok(); }
  Status WaitReady(SlotMemory&, void*) override { return Status::Ok(); }
  void MarkReleased(SlotMemory&, void*) override {}
};

}  // namespace

size_t LiveBufferBytes() { return g_live_bytes.load(); }
void AddLiveBufferBytes(ptrdiff_t delta) { g_live_bytes.fetch_add(static_cast<size_t>(delta)); }

std::unique_ptr<Backend> NewHostBackend() { return std::make_unique<HostBackend>(); }

bool CudaCompiledIn() {
#ifdef EPOCHFS_LOADER_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool CudaUsable(std::string* why_not) {
#ifdef EPOCHFS_LOADER_HAVE_CUDA
  return CudaDeviceUsable(why_not);
#else
  *why_not = "this build has no CUDA (no toolkit found when it was configured)";
  return false;
#endif
}

Result<std::unique_ptr<Backend>> NewBackend(DeviceKind kind, int cuda_device) {
  if (kind == DeviceKind::kCpu) return NewHostBackend();
  std::string why_not;
  if (!CudaUsable(&why_not)) {
    if (kind == DeviceKind::kCuda) {
      return Status(Code::kUnsupported, "device=cuda requested, but " + why_not, ENODEV);
    }
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      spdlog::info("epochfs loader: no CUDA ({}); batches are delivered in host memory", why_not);
    }
    return NewHostBackend();
  }
#ifdef EPOCHFS_LOADER_HAVE_CUDA
  return NewCudaBackend(cuda_device);
#else
  return NewHostBackend();  // unreachable: CudaUsable() is false without CUDA
#endif
}

}  // namespace epochfs::loader
