// The epochfs loader: feeds a training loop batches that are already in device memory.
//
// What it does. Given a list of sample files (or an ImageFolder-style tree, where each
// class folder becomes an integer label), a batch size and an explicit order per epoch
// (a permutation of sample indices, or this rank's shard of one), a reader thread lays
// batches out in a ring of staging buffers and has several worker threads open and read
// many files at once with io_uring (a pread loop where io_uring is missing). With CUDA the staging buffers are pinned
// (cudaHostAlloc) and each finished batch is copied to its own device buffer with
// cudaMemcpyAsync on a dedicated non-blocking stream, followed by an event; Next() makes
// the consumer's stream wait on that event, so neither the reader nor the consumer
// blocks the host on the copy. Without CUDA (no toolkit at build time, no device at run
// time, or device = kCpu) the same API hands out host buffers.
//
// The ring. `num_buffers` slots, each holding one batch: being filled by the reader,
// ready and waiting for the consumer, or leased to the consumer (a live Batch). The
// reader runs ahead of the consumer by as many slots as are not leased, so the default
// of 4 keeps 2-3 batches in flight while the consumer holds one. A slot returns to the
// ring when its Batch is destroyed; on CUDA its device buffer is reused only after the
// consumer stream's work queued before the release (the same rule as torch's
// record_stream).
//
// Batches. A batch is one contiguous buffer: labels (int64, one per sample) followed by
// the samples' bytes packed back to back, plus host-side offsets and lengths into the
// data. With `record_bytes` set, every sample is a fixed-size record (e.g. a .npy file
// whose header of `record_offset` bytes is skipped) and the data is a dense
// [batch, record_bytes] array, ready to be viewed as one shaped tensor.
//
// The plan. When the files live on an epochfs mount (a `.epochfs/plan` control file is
// found above them), StartEpoch() writes the epoch's order there before reading, so the
// filesystem prefetches exactly what comes next. A refused plan is a logged warning.
//
// Errors. A missing, unreadable, truncated or grown file, an allocation failure or a
// CUDA error ends the epoch: Next() returns the batches completed before it, then a
// Status naming the file or the cause. Stopping at any point (Stop(), a new
// StartEpoch(), destroying the Loader) joins the reader and drains its reads first.
//
// Thread-safety: a Loader is driven by one consumer thread (StartEpoch, Next, Stop). A
// Batch may be read and destroyed on any thread, and may outlive its Loader: the ring's
// memory is freed when the last of them goes.
#pragma once

#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace epochfs::loader {

// Errors are the project's Status values (base/status.h, linked as the small
// epochfs_status library, without the cache itself). A file whose size differs from
// when it was listed is Code::kStale; an allocation failure kNoMemory; a CUDA failure
// kDeviceError.
using ::epochfs::Code;
using ::epochfs::Result;
using ::epochfs::Status;

// ---- Inputs ----------------------------------------------------------------------

struct Dataset {
  std::vector<std::string> files;
  std::vector<int64_t> labels;       // one per file
  std::vector<std::string> classes;  // label i is classes[i]
};

// Scans `root` as torchvision's ImageFolder does: every sub-folder of `root` is a class
// (sorted by name, label = position), its files (recursively, symlinks followed) are the
// samples, ordered by (folder path, file name). Hidden entries (".x") and files directly
// in `root` are skipped. Any file extension is accepted: samples are raw bytes.
Result<Dataset> ScanImageFolder(const std::string& root);

// ---- Orders ----------------------------------------------------------------------

// 0, 1, ..., n-1.
std::vector<int64_t> SequentialOrder(size_t n);
// A permutation of 0..n-1 from `seed` (Fisher-Yates over splitmix64; the same on every
// platform). To reproduce torch's DistributedSampler shuffle exactly, build the
// permutation with torch.randperm, as the Python binding does.
std::vector<int64_t> ShuffledOrder(size_t n, uint64_t seed);
// This rank's part of `order`, split exactly as torch.utils.data.DistributedSampler
// does: without drop_last the order is padded with its own head to a multiple of
// world_size; with drop_last its tail is cut to one; rank r then takes r, r+w, r+2w...
Result<std::vector<int64_t>> ShardOrder(const std::vector<int64_t>& order, int rank, int world_size,
                                        bool drop_last = false);

// ---- The loader ------------------------------------------------------------------

enum class DeviceKind { kAuto, kCuda, kCpu };
// kAuto: io_uring, or pread where it is missing, and pread for samples of 1 MiB and more
// on average (copying whole large files, a plain pread is the faster of the two).
enum class IoBackend { kAuto, kUring, kPread };

struct LoaderOptions {
  std::vector<std::string> files;  // sample files, read whole (or as records, below)
  std::vector<int64_t> labels;     // empty (all 0) or one per file
  size_t batch_size = 32;
  bool drop_last = false;  // drop a last batch smaller than batch_size

  // kAuto: CUDA when a device is usable, else host (logged once). kCuda fails without one.
  DeviceKind device = DeviceKind::kAuto;
  int cuda_device = 0;

  // Fixed-size records: when record_bytes > 0, every file must be exactly
  // record_offset + record_bytes long, and bytes [record_offset, +record_bytes) of it
  // are the sample.
  uint64_t record_offset = 0;
  uint64_t record_bytes = 0;

  size_t num_buffers = 4;     // batch slots in the ring (>= 2)
  unsigned queue_depth = 64;  // files in flight at once, over all reader threads
  // Threads reading files (each with its own io_uring ring): a read from the page cache
  // is a copy made by the thread that submits it, so delivery scales with them.
  // 0: half the cores, at least 2 and at most 16.
  unsigned reader_threads = 0;
  IoBackend io = IoBackend::kAuto;
  bool publish_plan = true;  // write each epoch's order to an epochfs mount's plan file
};

struct LoaderStats {
  uint64_t epochs = 0;
  uint64_t batches = 0;  // handed to the consumer
  uint64_t files_read = 0;
  uint64_t bytes_read = 0;
  uint64_t plans_published = 0;
  uint64_t plans_refused = 0;  // publish attempts that failed (logged as warnings)
  double consumer_wait_s = 0;  // time Next() spent waiting for the reader
};

// One batch of `size()` samples. Holding it keeps its slot out of the ring.
class Batch {
 public:
  virtual ~Batch() = default;
  virtual uint64_t epoch() const = 0;  // 1 for the first StartEpoch()
  virtual size_t index() const = 0;    // position of this batch in its epoch
  virtual size_t size() const = 0;     // samples in this batch
  virtual bool on_device() const = 0;  // data()/labels() are CUDA device memory
  virtual int device_id() const = 0;   // the CUDA device, or -1 on the host

  // size() int64 labels, in the same memory as data().
  virtual const int64_t* labels() const = 0;
  // The samples' bytes, back to back (256-byte aligned start).
  virtual const void* data() const = 0;
  virtual size_t data_bytes() const = 0;
  // Host arrays of size(): where each sample starts in data(), its length, its label and
  // its index into LoaderOptions::files.
  virtual const int64_t* offsets() const = 0;
  virtual const int64_t* lengths() const = 0;
  virtual const int64_t* host_labels() const = 0;
  virtual const int64_t* sample_indices() const = 0;
};

class Loader {
 public:
  virtual ~Loader() = default;

  // Validates the options, stats every file (a missing or non-regular file is an error
  // naming it), allocates the ring (an allocation failure is kNoMemory naming the size
  // and where), sets up io_uring (or the pread fallback) and finds an epochfs mount.
  static Result<std::unique_ptr<Loader>> Create(LoaderOptions options);

  // Starts an epoch reading `order` (indices into files; repeats allowed), stopping any
  // epoch in progress first. Publishes the order when on an epochfs mount.
  virtual Status StartEpoch(std::vector<int64_t> order) = 0;

  // The next batch of the epoch, in order; nullptr at the end of the epoch. On CUDA,
  // `consumer_stream` (a cudaStream_t; nullptr = the legacy default stream) is made to
  // wait for the batch's copy, and the batch's buffer is reused only after work queued
  // on it before the batch is destroyed.
  virtual Result<std::shared_ptr<const Batch>> Next(void* consumer_stream = nullptr) = 0;

  // Stops the epoch in progress (no-op if none): cancels queued reads, waits for those
  // in flight, joins the reader. Batches already handed out stay valid.
  virtual void Stop() = 0;

  virtual size_t num_files() const = 0;
  // Batches an epoch over an order of `order_size` indices will have.
  virtual size_t NumBatches(size_t order_size) const = 0;
  virtual bool on_device() const = 0;
  virtual int device_id() const = 0;
  virtual const char* io_backend() const = 0;  // "io_uring" or "pread"
  virtual unsigned reader_threads() const = 0;
  // The epochfs mount root the plan is published to, empty if none.
  virtual const std::string& plan_root() const = 0;
  virtual LoaderStats stats() const = 0;
};

}  // namespace epochfs::loader

// Returns early from the enclosing function with the status when it is not ok.
#define EPOCHFS_LOADER_RETURN_IF_ERROR(expr) \
  do {                                       \
    ::epochfs::loader::Status _st = (expr);  \
    if (!_st.ok()) return _st;               \
  } while (0)
