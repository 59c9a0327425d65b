#include "cache/io_engine.h"

#include <fmt/format.h>
#include <liburing.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/thread_annotations.h"

namespace epochfs::cache {
namespace {

// A transient error is retried this many times before it is reported; EAGAIN on a
// regular file is rare, so this only guards against spinning forever.
constexpr int kMaxTransientRetries = 1000;

Status ErrnoStatus(int err, const char* what, int fd, uint64_t offset) {
  return Status::FromErrno(err, fmt::format("{} fd {} offset {}", what, fd, offset));
}

// ---------------------------------------------------------------------------------
// pread/pwrite

Result<size_t> PreadFully(int fd, void* buf, size_t len, uint64_t offset) {
  char* out = static_cast<char*>(buf);
  size_t done = 0;
  int retries = 0;
  while (done < len) {
    ssize_t n = ::pread(fd, out + done, len - done, static_cast<off_t>(offset + done));
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0) {
      break;  // end of file
    } else if ((errno == EINTR || errno == EAGAIN) && ++retries < kMaxTransientRetries) {
      continue;
    } else {
      return ErrnoStatus(errno, "read", fd, offset + done);
    }
  }
  return done;
}

Status PwriteFully(int fd, const void* buf, size_t len, uint64_t offset) {
  const char* in = static_cast<const char*>(buf);
  size_t done = 0;
  int retries = 0;
  while (done < len) {
    ssize_t n = ::pwrite(fd, in + done, len - done, static_cast<off_t>(offset + done));
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0) {
      return ErrnoStatus(EIO, "write made no progress,", fd, offset + done);
    } else if ((errno == EINTR || errno == EAGAIN) && ++retries < kMaxTransientRetries) {
      continue;
    } else {
      return ErrnoStatus(errno, "write", fd, offset + done);
    }
  }
  return Status::Ok();
}

Status FdataSync(int fd) {
  if (::fdatasync(fd) != 0) return Status::FromErrno(errno, fmt::format("fdatasync fd {}", fd));
  return Status::Ok();
}

class PreadIoEngine final : public IoEngine {
 public:
  Result<size_t> ReadAt(int fd, void* buf, size_t len, uint64_t offset) override {
    return PreadFully(fd, buf, len, offset);
  }
  Status ReadBatch(std::span<ReadOp> ops) override {
    Status first;
    for (ReadOp& op : ops) {
      Result<size_t> r = PreadFully(op.fd, op.buf, op.len, op.offset);
      op.status = r.status();
      op.bytes_read = r.ok() ? *r : 0;
      if (!r.ok() && first.ok()) first = r.status();
    }
    return first;
  }
  Status WriteAt(int fd, const void* buf, size_t len, uint64_t offset) override {
    return PwriteFully(fd, buf, len, offset);
  }
  Status DataSync(int fd) override { return FdataSync(fd); }
  bool is_io_uring() const override { return false; }
};

// ---------------------------------------------------------------------------------
// io_uring

constexpr unsigned kRingDepth = 64;
// One SQE moves at most this much; longer transfers continue as "short" ones.
constexpr size_t kMaxSqeBytes = 1u << 30;

// An initialised ring; io_uring_queue_exit on destruction.
class Ring {
 public:
  // Returns nullptr and sets *err (positive errno) when the kernel refuses.
  static std::unique_ptr<Ring> Create(int* err) {
    auto ring = std::unique_ptr<Ring>(new Ring());
    int rc = io_uring_queue_init(kRingDepth, &ring->ring_, 0);
    if (rc < 0) {
      *err = -rc;
      return nullptr;
    }
    ring->initialised_ = true;
    return ring;
  }
  ~Ring() {
    if (initialised_) io_uring_queue_exit(&ring_);
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  io_uring* get() { return &ring_; }

 private:
  Ring() = default;
  io_uring ring_{};
  bool initialised_ = false;
};

// Engines alive now, so a thread can drop rings it made for engines that are gone.
Mutex g_live_engines_mu;
std::unordered_set<uint64_t> g_live_engines GUARDED_BY(g_live_engines_mu);
std::atomic<uint64_t> g_next_engine_id{1};

// This thread's rings, one per engine; destroyed when the thread exits.
struct ThreadRings {
  std::vector<std::pair<uint64_t, std::unique_ptr<Ring>>> rings;
};
thread_local ThreadRings t_rings;

// One read in flight on a ring, in liburing's terms (err is a positive errno).
struct Transfer {
  int fd = -1;
  char* buf = nullptr;
  size_t len = 0;
  uint64_t offset = 0;
  size_t done = 0;
  int err = 0;
  int retries = 0;
};

// Runs the reads `xfers` to completion: short ones are continued, EAGAIN/EINTR
// resubmitted. Never returns while the kernel may still write into a buffer.
void RunTransfers(io_uring* ring, std::span<Transfer> xfers) {
  std::deque<size_t> todo;
  for (size_t i = 0; i < xfers.size(); ++i) {
    if (xfers[i].len > 0) todo.push_back(i);
  }
  unsigned in_flight = 0;  // prepared SQEs whose CQE has not been seen
  int enter_failures = 0;
  while (!todo.empty() || in_flight > 0) {
    while (!todo.empty() && in_flight < kRingDepth) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      if (sqe == nullptr) break;
      size_t i = todo.front();
      todo.pop_front();
      Transfer& x = xfers[i];
      unsigned n = static_cast<unsigned>(std::min(x.len - x.done, kMaxSqeBytes));
      io_uring_prep_read(sqe, x.fd, x.buf + x.done, n, x.offset + x.done);
      io_uring_sqe_set_data64(sqe, i);
      ++in_flight;
    }
    int rc = io_uring_submit_and_wait(ring, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      // The ring itself failed. Prepared SQEs stay queued in the SQ ring and go out
      // with the next enter; fail the transfers not yet prepared so the caller sees
      // an error, and keep reaping what is in flight.
      if (++enter_failures > kMaxTransientRetries) {
        spdlog::critical("io_uring_enter keeps failing ({}); aborting", std::strerror(-rc));
        std::abort();  // returning would let the kernel write into freed buffers
      }
      for (size_t i : todo) xfers[i].err = -rc;
      todo.clear();
    }
    io_uring_cqe* cqe = nullptr;
    unsigned seen = 0;
    unsigned head;
    io_uring_for_each_cqe(ring, head, cqe) {
      ++seen;
      --in_flight;
      size_t i = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
      Transfer& x = xfers[i];
      int res = cqe->res;
      if (res == -EAGAIN || res == -EINTR) {
        if (++x.retries < kMaxTransientRetries) {
          todo.push_back(i);
        } else {
          x.err = -res;
        }
      } else if (res < 0) {
        x.err = -res;
      } else if (res == 0) {
        // end of file: done
      } else {
        x.done += static_cast<size_t>(res);
        if (x.done < x.len) todo.push_back(i);  // short: continue where it stopped
      }
    }
    io_uring_cq_advance(ring, seen);
  }
}

class IoUringIoEngine final : public IoEngine {
 public:
  IoUringIoEngine() : id_(g_next_engine_id.fetch_add(1)) {
    MutexLock lock(g_live_engines_mu);
    g_live_engines.insert(id_);
  }
  ~IoUringIoEngine() override {
    MutexLock lock(g_live_engines_mu);
    g_live_engines.erase(id_);
  }

  // Makes the probe's ring this thread's ring for this engine.
  void AdoptRing(std::unique_ptr<Ring> ring) { t_rings.rings.emplace_back(id_, std::move(ring)); }

  // One transfer goes through pread/pwrite on the calling thread: the ring pays only
  // where transfers overlap, and a file whose filesystem cannot read without blocking
  // (a FUSE source such as GlusterFS's client, NFS) has each of its requests handed to
  // an io-wq worker thread and back, which costs the daemon more CPU than a pread
  // (docs/benchmarks.md, "The daemon's work per file read from a network source").
  Result<size_t> ReadAt(int fd, void* buf, size_t len, uint64_t offset) override {
    return PreadFully(fd, buf, len, offset);
  }

  Status ReadBatch(std::span<ReadOp> ops) override {
    io_uring* ring = ops.size() > 1 ? ThisThreadsRing() : nullptr;
    if (ring == nullptr) return PreadIoEngine().ReadBatch(ops);
    std::vector<Transfer> xfers(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      xfers[i] = Transfer{.fd = ops[i].fd,
                          .buf = static_cast<char*>(ops[i].buf),
                          .len = ops[i].len,
                          .offset = ops[i].offset};
    }
    RunTransfers(ring, xfers);
    Status first;
    for (size_t i = 0; i < ops.size(); ++i) {
      ops[i].bytes_read = xfers[i].err == 0 ? xfers[i].done : 0;
      ops[i].status = xfers[i].err == 0 ? Status::Ok()
                                        : ErrnoStatus(xfers[i].err, "read", ops[i].fd,
                                                      ops[i].offset + xfers[i].done);
      if (!ops[i].status.ok() && first.ok()) first = ops[i].status;
    }
    return first;
  }

  Status WriteAt(int fd, const void* buf, size_t len, uint64_t offset) override {
    return PwriteFully(fd, buf, len, offset);
  }

  Status DataSync(int fd) override { return FdataSync(fd); }
  bool is_io_uring() const override { return true; }

 private:
  // This thread's ring for this engine, created on first use; nullptr when the kernel
  // refuses a ring on this thread (then the call falls back to pread).
  io_uring* ThisThreadsRing() {
    for (auto& [id, ring] : t_rings.rings) {
      if (id == id_) return ring->get();
    }
    {
      // Rings made for engines that no longer exist are only reachable from here.
      MutexLock lock(g_live_engines_mu);
      std::erase_if(t_rings.rings,
                    [](const auto& entry) {
                      g_live_engines_mu.AssertHeld();  // called back under the lock above
                      return g_live_engines.count(entry.first) == 0;
                    });
    }
    int err = 0;
    std::unique_ptr<Ring> ring = Ring::Create(&err);
    if (ring == nullptr) {
      static std::once_flag logged;
      std::call_once(logged, [err] {
        spdlog::warn("io_uring ring setup failed on a thread ({}); that thread uses pread",
                     std::strerror(err));
      });
      return nullptr;
    }
    io_uring* raw = ring->get();
    t_rings.rings.emplace_back(id_, std::move(ring));
    return raw;
  }

  const uint64_t id_;
};

}  // namespace

std::unique_ptr<IoEngine> NewPreadIoEngine() { return std::make_unique<PreadIoEngine>(); }

Result<std::unique_ptr<IoEngine>> NewIoUringIoEngine() {
  int err = 0;
  std::unique_ptr<Ring> ring = Ring::Create(&err);
  if (ring == nullptr) {
    return Status::FromErrno(err, "io_uring_queue_init (kernel.io_uring_disabled or seccomp?)");
  }
  // Reads at an offset need IORING_OP_READ (Linux 5.6).
  io_uring_probe* probe = io_uring_get_probe_ring(ring->get());
  bool supported = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_READ);
  if (probe != nullptr) io_uring_free_probe(probe);
  if (!supported) return Status::Unsupported("io_uring lacks IORING_OP_READ");
  auto engine = std::make_unique<IoUringIoEngine>();
  engine->AdoptRing(std::move(ring));
  return std::unique_ptr<IoEngine>(std::move(engine));
}

std::unique_ptr<IoEngine> NewIoEngine(bool prefer_io_uring) {
  if (prefer_io_uring) {
    Result<std::unique_ptr<IoEngine>> uring = NewIoUringIoEngine();
    if (uring.ok()) return std::move(uring).value();
    static std::once_flag logged;
    std::call_once(logged, [&] {
      spdlog::warn("io_uring unavailable, using pread/pwrite: {}", uring.status().ToString());
    });
  }
  return NewPreadIoEngine();
}

}  // namespace epochfs::cache
