// The loader (see loader.h): the ring of batch slots, the reader thread and Next().
//
// Slot cycle: free -> filling (reader) -> ready (queued for the consumer) -> leased (a
// live Batch) -> free. The reader takes free slots in batch order, adds every file of
// the batch to the FileReader, and keeps several batches in flight so that the io queue
// never drains between batches; a batch whose reads are all done is handed to the
// backend (the device copy) and queued, strictly in order. The first failed batch at
// the head of the order ends the epoch: batches before it are delivered, later ones
// are discarded, and Next() returns the error.
//
// Lock order: Ring::mu is the only lock. It is never held across io, CUDA calls or a
// join.
#include "loader/loader.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "base/thread_annotations.h"
#include "loader/backend.h"
#include "loader/file_reader.h"
#include "loader/plan_publisher.h"

namespace epochfs::loader {
namespace {

constexpr size_t kAlign = 256;  // DLPack asks CUDA pointers to be 256-byte aligned
// From this mean sample size on, io=kAuto reads with pread workers (see Create).
constexpr uint64_t kLargeSampleBytes = 1 << 20;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

struct Slot {
  std::unique_ptr<SlotMemory> mem;
  // Written by the reader while filling, read by the consumer while leased.
  uint64_t epoch = 0;
  size_t index = 0;
  size_t data_bytes = 0;
  std::vector<int64_t> offsets, lengths, labels, indices;
  void* consumer_stream = nullptr;  // set by Next(), used at release
};

// The ring: slots, their queues and the state of the epoch being read. Shared by the
// loader and every live Batch (which may outlive the loader).
struct Ring {
  // Declared first so it is destroyed last: slots free their memory through it.
  std::unique_ptr<Backend> backend;
  std::vector<Slot> slots;  // fixed after Create()
  size_t label_area = 0;    // bytes before the data in each slot

  Mutex mu;
  std::condition_variable reader_cv;    // a slot was freed, or stop
  std::condition_variable consumer_cv;  // a batch is ready, or the epoch ended
  std::vector<size_t> free_slots GUARDED_BY(mu);
  std::deque<size_t> ready GUARDED_BY(mu);
  size_t leased GUARDED_BY(mu) = 0;
  bool reader_done GUARDED_BY(mu) = true;
  Status error GUARDED_BY(mu);  // why the epoch ended early
  std::atomic<bool> stop{false};        // written under mu, read anywhere

  std::atomic<uint64_t> batches{0}, files_read{0}, bytes_read{0};

  ~Ring() {
    slots.clear();  // before the backend (declared first) goes
  }

  // Whether Next() has a batch, an end or an error to return without waiting.
  bool CanReturnLocked() const REQUIRES(mu) {
    return !ready.empty() || reader_done || leased == slots.size();
  }

  void Release(size_t s) {
    backend->MarkReleased(*slots[s].mem, slots[s].consumer_stream);
    MutexLock lock(mu);
    --leased;
    free_slots.push_back(s);
    reader_cv.notify_one();
  }
};

class BatchImpl final : public Batch {
 public:
  BatchImpl(std::shared_ptr<Ring> ring, size_t s) : ring_(std::move(ring)), s_(s) {}
  ~BatchImpl() override { ring_->Release(s_); }

  uint64_t epoch() const override { return slot().epoch; }
  size_t index() const override { return slot().index; }
  size_t size() const override { return slot().indices.size(); }
  bool on_device() const override { return ring_->backend->on_device(); }
  int device_id() const override { return ring_->backend->device_id(); }
  const int64_t* labels() const override {
    return reinterpret_cast<const int64_t*>(slot().mem->data);
  }
  const void* data() const override { return slot().mem->data + ring_->label_area; }
  size_t data_bytes() const override { return slot().data_bytes; }
  const int64_t* offsets() const override { return slot().offsets.data(); }
  const int64_t* lengths() const override { return slot().lengths.data(); }
  const int64_t* host_labels() const override { return slot().labels.data(); }
  const int64_t* sample_indices() const override { return slot().indices.data(); }

 private:
  const Slot& slot() const { return ring_->slots[s_]; }
  std::shared_ptr<Ring> ring_;
  size_t s_;
};

class LoaderImpl final : public Loader {
 public:
  LoaderImpl(LoaderOptions options, std::vector<uint64_t> sizes, std::shared_ptr<Ring> ring,
             std::unique_ptr<FileReader> reader, unsigned reader_threads,
             std::unique_ptr<PlanPublisher> publisher)
      : options_(std::move(options)),
        reader_threads_(reader_threads),
        sizes_(std::move(sizes)),
        ring_(std::move(ring)),
        reader_(std::move(reader)),
        publisher_(std::move(publisher)) {
    if (publisher_) plan_root_ = publisher_->root();
  }

  ~LoaderImpl() override { Stop(); }

  Status StartEpoch(std::vector<int64_t> order) override {
    for (int64_t i : order) {
      if (i < 0 || static_cast<size_t>(i) >= sizes_.size()) {
        return Status(Code::kInvalidArgument,
                      "order: index " + std::to_string(i) + " is not in [0, " +
                          std::to_string(sizes_.size()) + ")",
                      EINVAL);
      }
    }
    Stop();
    const size_t batches = NumBatches(order.size());
    order.resize(std::min(order.size(), batches * options_.batch_size));  // drop_last
    ++epoch_;
    if (publisher_) Publish(order);
    {
      MutexLock lock(ring_->mu);
      ring_->stop = false;
      ring_->reader_done = false;
      ring_->error = Status::Ok();
    }
    epoch_started_ = true;
    thread_ = std::thread(&LoaderImpl::ReaderMain, this, std::move(order), epoch_);
    return Status::Ok();
  }

  Result<std::shared_ptr<const Batch>> Next(void* consumer_stream) override {
    if (!epoch_started_) {
      return Status(Code::kInvalidArgument, "Next() called before StartEpoch()", EINVAL);
    }
    Ring& ring = *ring_;
    size_t s;
    {
      MutexLock lock(ring.mu);
      if (!ring.CanReturnLocked()) {
        auto t0 = std::chrono::steady_clock::now();
        while (!ring.CanReturnLocked()) lock.Wait(ring.consumer_cv);
        consumer_wait_s_ +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      if (ring.ready.empty()) {
        if (ring.reader_done) {
          if (!ring.error.ok()) return ring.error;
          return std::shared_ptr<const Batch>();  // end of epoch
        }
        return Status(Code::kBusy,
                      "all " + std::to_string(ring.slots.size()) +
                          " batch buffers are held by the caller, so no batch can be read: "
                          "drop (or copy) earlier batches, or raise num_buffers",
                      EBUSY);
      }
      s = ring.ready.front();
      ring.ready.pop_front();
      ++ring.leased;
    }
    ring.slots[s].consumer_stream = consumer_stream;
    auto batch = std::make_shared<BatchImpl>(ring_, s);  // releases the slot if we fail
    Status st = ring.backend->WaitReady(*ring.slots[s].mem, consumer_stream);
    if (!st.ok()) return st;
    ring.batches.fetch_add(1);
    return std::shared_ptr<const Batch>(std::move(batch));
  }

  void Stop() override {
    if (!thread_.joinable()) return;
    {
      MutexLock lock(ring_->mu);
      ring_->stop = true;
      ring_->reader_cv.notify_all();
    }
    thread_.join();
    MutexLock lock(ring_->mu);
    for (size_t s : ring_->ready) ring_->free_slots.push_back(s);
    ring_->ready.clear();
    ring_->reader_done = true;
  }

  size_t num_files() const override { return sizes_.size(); }
  size_t NumBatches(size_t n) const override {
    size_t b = options_.batch_size;
    return options_.drop_last ? n / b : (n + b - 1) / b;
  }
  bool on_device() const override { return ring_->backend->on_device(); }
  int device_id() const override { return ring_->backend->device_id(); }
  const char* io_backend() const override { return reader_->name(); }
  unsigned reader_threads() const override { return reader_threads_; }
  const std::string& plan_root() const override { return plan_root_; }

  LoaderStats stats() const override {
    LoaderStats s;
    s.epochs = epoch_;
    s.batches = ring_->batches.load();
    s.files_read = ring_->files_read.load();
    s.bytes_read = ring_->bytes_read.load();
    s.plans_published = plans_published_;
    s.plans_refused = plans_refused_;
    s.consumer_wait_s = consumer_wait_s_;
    return s;
  }

 private:
  // A batch being read: its slot and its outstanding requests.
  struct InFlight {
    size_t slot = 0;
    size_t remaining = 0;
    size_t copy_bytes = 0;
    Status status;
    std::vector<ReadRequest> requests;
  };

  void Publish(const std::vector<int64_t>& order) {
    Status st = publisher_->Publish(order);
    if (st.ok()) {
      ++plans_published_;
      return;
    }
    ++plans_refused_;
    spdlog::warn("epochfs loader: could not publish the epoch {} plan ({}); reading without it",
                 epoch_, st.ToString());
  }

  // Lays batch `b` of `order` out in slot `s` and queues its reads.
  Status Prepare(const std::vector<int64_t>& order, uint64_t epoch, size_t b, InFlight* f) {
    Ring& ring = *ring_;
    Slot& slot = ring.slots[f->slot];
    EPOCHFS_LOADER_RETURN_IF_ERROR(ring.backend->BeginFill(*slot.mem));
    const size_t begin = b * options_.batch_size;
    const size_t count = std::min(options_.batch_size, order.size() - begin);
    slot.epoch = epoch;
    slot.index = b;
    slot.offsets.resize(count);
    slot.lengths.resize(count);
    slot.labels.resize(count);
    slot.indices.resize(count);
    uint64_t pos = 0;
    for (size_t i = 0; i < count; ++i) {
      const size_t idx = static_cast<size_t>(order[begin + i]);
      const uint64_t len = options_.record_bytes > 0 ? options_.record_bytes : sizes_[idx];
      slot.offsets[i] = static_cast<int64_t>(pos);
      slot.lengths[i] = static_cast<int64_t>(len);
      slot.labels[i] = options_.labels.empty() ? 0 : options_.labels[idx];
      slot.indices[i] = static_cast<int64_t>(idx);
      pos += len;
    }
    slot.data_bytes = pos;
    f->copy_bytes = ring.label_area + pos;
    if (f->copy_bytes > slot.mem->bytes) {  // sizes are fixed at Create(); cannot happen
      return Status(Code::kInvalidArgument,
                    "batch of " + std::to_string(f->copy_bytes) + " bytes exceeds its buffer",
                    EINVAL);
    }
    std::memcpy(slot.mem->host, slot.labels.data(), count * sizeof(int64_t));
    uint8_t* data = slot.mem->host + ring.label_area;
    f->requests.resize(count);
    f->remaining = count;
    for (size_t i = 0; i < count; ++i) {
      const size_t idx = static_cast<size_t>(slot.indices[i]);
      ReadRequest& r = f->requests[i];
      r.path = &options_.files[idx];
      r.file_size = sizes_[idx];
      r.offset = options_.record_offset;
      r.length = static_cast<uint64_t>(slot.lengths[i]);
      r.dest = data + slot.offsets[i];
      r.tag = f;
      r.status = Status::Ok();
    }
    for (ReadRequest& r : f->requests) reader_->Add(&r);
    return Status::Ok();
  }

  void ReaderMain(std::vector<int64_t> order, uint64_t epoch) {
    Ring& ring = *ring_;
    const size_t total = NumBatches(order.size());
    std::deque<InFlight> window;  // batches being read, in order; references stay valid
    std::vector<ReadRequest*> done;
    size_t next = 0;
    Status failure;
    auto give_back = [&](size_t s) {
      MutexLock lock(ring.mu);
      ring.free_slots.push_back(s);
    };

    bool admit = true;  // false once a batch could not even be set up
    while (!ring.stop) {
      // Start every batch a free slot allows.
      while (admit && failure.ok() && next < total) {
        size_t s;
        {
          MutexLock lock(ring.mu);
          if (ring.free_slots.empty() || ring.stop) break;
          s = ring.free_slots.back();
          ring.free_slots.pop_back();
        }
        InFlight& f = window.emplace_back();
        f.slot = s;
        Status st = Prepare(order, epoch, next, &f);
        if (!st.ok()) {  // nothing was queued for it; it fails in its turn, at the head
          f.status = st;
          f.remaining = 0;
          admit = false;
          break;
        }
        ++next;
      }
      if (window.empty()) {
        if (!failure.ok() || !admit || next == total) break;
        MutexLock lock(ring.mu);
        while (!ring.stop && ring.free_slots.empty()) lock.Wait(ring.reader_cv);
        continue;
      }
      if (window.front().remaining > 0) {
        done.clear();
        reader_->Wait(&done);
        for (ReadRequest* r : done) {
          auto* f = static_cast<InFlight*>(r->tag);
          --f->remaining;
          if (!r->status.ok()) {
            if (f->status.ok()) f->status = r->status;
          } else {
            ring.files_read.fetch_add(1);
            ring.bytes_read.fetch_add(r->length);
          }
        }
      }
      // Hand over finished batches at the head, in order. After a failure the rest of
      // the epoch is discarded.
      while (!window.empty() && window.front().remaining == 0) {
        InFlight& f = window.front();
        Status st = failure.ok() ? f.status : failure;
        if (st.ok()) st = ring.backend->EndFill(*ring.slots[f.slot].mem, f.copy_bytes);
        if (st.ok()) {
          MutexLock lock(ring.mu);
          ring.ready.push_back(f.slot);
          ring.consumer_cv.notify_one();
        } else {
          if (failure.ok()) {
            failure = st;
            reader_->CancelQueued();
          }
          give_back(f.slot);
        }
        window.pop_front();
      }
    }

    // Stopped, failed or finished: reads in flight target our slots, so let them land.
    reader_->CancelQueued();
    while (reader_->pending() > 0) {
      done.clear();
      reader_->Wait(&done);
    }
    for (InFlight& f : window) give_back(f.slot);
    MutexLock lock(ring.mu);
    ring.reader_done = true;
    if (!ring.stop) ring.error = failure;
    ring.consumer_cv.notify_all();
  }

  const LoaderOptions options_;
  const unsigned reader_threads_;
  const std::vector<uint64_t> sizes_;
  std::shared_ptr<Ring> ring_;
  std::unique_ptr<FileReader> reader_;  // used by the reader thread only while it runs
  std::unique_ptr<PlanPublisher> publisher_;
  std::string plan_root_;
  std::thread thread_;
  uint64_t epoch_ = 0;
  bool epoch_started_ = false;
  uint64_t plans_published_ = 0, plans_refused_ = 0;
  double consumer_wait_s_ = 0;
};

unsigned ReaderThreads(const LoaderOptions& o) {
  if (o.reader_threads > 0) return o.reader_threads;
  // Half the cores (the other half run the training loop and its data work), and two at
  // least: a second reader pays even on two cores (docs/benchmarks.md, "GPU loader").
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::clamp(cores / 2, 2u, 16u);
}

Status ValidateOptions(const LoaderOptions& o) {
  auto bad = [](const std::string& m) { return Status(Code::kInvalidArgument, m, EINVAL); };
  if (o.files.empty()) return bad("no files");
  if (o.batch_size == 0) return bad("batch_size must be at least 1");
  if (!o.labels.empty() && o.labels.size() != o.files.size()) {
    return bad("labels: " + std::to_string(o.labels.size()) + " labels for " +
               std::to_string(o.files.size()) + " files");
  }
  if (o.num_buffers < 2) return bad("num_buffers must be at least 2");
  if (o.queue_depth == 0 || o.queue_depth > 4096) return bad("queue_depth must be in [1, 4096]");
  if (o.reader_threads > 256) return bad("reader_threads must be in [0, 256] (0: half the cores)");
  if (o.record_bytes == 0 && o.record_offset != 0) {
    return bad("record_offset needs record_bytes (fixed-size records)");
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Loader>> Loader::Create(LoaderOptions options) {
  EPOCHFS_LOADER_RETURN_IF_ERROR(ValidateOptions(options));

  std::vector<uint64_t> sizes(options.files.size());
  for (size_t i = 0; i < options.files.size(); ++i) {
    const std::string& path = options.files[i];
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, path);
    if (!S_ISREG(st.st_mode)) {
      return Status(Code::kIoError,
                    path + ": not a regular file (" +
                        (S_ISDIR(st.st_mode) ? "a directory" : "a special file") + ")",
                    S_ISDIR(st.st_mode) ? EISDIR : EINVAL);
    }
    sizes[i] = static_cast<uint64_t>(st.st_size);
    if (options.record_bytes > 0 && sizes[i] != options.record_offset + options.record_bytes) {
      return Status(
          Code::kInvalidArgument,
          path + ": is " + std::to_string(sizes[i]) + " bytes; fixed-size records need exactly " +
              std::to_string(options.record_offset) + " + " + std::to_string(options.record_bytes),
          EINVAL);
    }
  }

  // Room for the largest batch any order can make: the batch_size largest samples.
  const size_t b = std::min(options.batch_size, sizes.size());
  uint64_t max_batch_bytes;
  if (options.record_bytes > 0) {
    max_batch_bytes = options.record_bytes * b;
  } else {
    std::vector<uint64_t> sorted = sizes;
    std::nth_element(sorted.begin(), sorted.begin() + (b - 1), sorted.end(),
                     std::greater<uint64_t>());
    max_batch_bytes = 0;
    for (size_t i = 0; i < b; ++i) max_batch_bytes += sorted[i];
  }

  auto backend = NewBackend(options.device, options.cuda_device);
  if (!backend.ok()) return backend.status();
  auto ring = std::make_shared<Ring>();
  ring->backend = std::move(backend.value());
  ring->label_area = RoundUp(options.batch_size * sizeof(int64_t), kAlign);
  const size_t slot_bytes = ring->label_area + RoundUp(max_batch_bytes, kAlign);
  ring->slots.resize(options.num_buffers);
  for (size_t s = 0; s < options.num_buffers; ++s) {
    auto mem = ring->backend->Allocate(slot_bytes, s, options.num_buffers);
    if (!mem.ok()) return mem.status();  // the ring frees what was allocated
    ring->slots[s].mem = std::move(mem.value());
    // Not shared yet; locked only because the analysis cannot know that.
    MutexLock lock(ring->mu);
    ring->free_slots.push_back(options.num_buffers - 1 - s);
  }

  // Several threads, each with its own reader: a read from the page cache is a copy made
  // by the thread that submits it (file_reader.h, NewParallelReader).
  const unsigned threads = ReaderThreads(options);
  const unsigned depth_each = std::max(1u, options.queue_depth / threads);
  std::vector<std::unique_ptr<FileReader>> readers;
  bool use_uring = options.io != IoBackend::kPread;
  // Large samples: a worker's plain pread copies a whole file from the page cache faster
  // than its ring does, and the ring's batching of many small files is what it is for
  // (docs/benchmarks.md, "GPU loader").
  uint64_t total_bytes = 0;
  for (uint64_t size : sizes) total_bytes += size;
  if (options.io == IoBackend::kAuto && total_bytes / sizes.size() >= kLargeSampleBytes) {
    use_uring = false;
  }
  for (unsigned t = 0; use_uring && t < threads; ++t) {
    Status why_not;
    std::unique_ptr<FileReader> ring = NewUringReader(depth_each, &why_not);
    if (ring) {
      readers.push_back(std::move(ring));
      continue;
    }
    if (options.io == IoBackend::kUring) return why_not;
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      spdlog::warn("epochfs loader: io_uring unavailable ({}); reading with pread",
                   why_not.ToString());
    }
    use_uring = false;
    readers.clear();  // every worker reads the same way
  }
  while (!use_uring && readers.size() < threads) readers.push_back(NewPreadReader());
  std::unique_ptr<FileReader> reader = NewParallelReader(std::move(readers), depth_each);

  std::unique_ptr<PlanPublisher> publisher;
  if (options.publish_plan) {
    publisher = PlanPublisher::ForFiles(options.files);
    if (publisher) {
      spdlog::info(
          "epochfs loader: files are on the epochfs mount {}; publishing each epoch's order",
          publisher->root());
      if (publisher->unplannable() > 0) {
        spdlog::warn(
            "epochfs loader: {} files are outside {} or have a newline in their name; "
            "they are left out of the plan",
            publisher->unplannable(), publisher->root());
      }
    }
  }

  return std::unique_ptr<Loader>(new LoaderImpl(std::move(options), std::move(sizes),
                                                std::move(ring), std::move(reader), threads,
                                                std::move(publisher)));
}

}  // namespace epochfs::loader
