// The parallel FileReader (see file_reader.h): several threads, each with a reader of its
// own (an io_uring ring, or pread), share the requests.
//
// Why: a read of a file the page cache holds completes inside the submitting thread (the
// kernel copies the pages out during io_uring_enter), so one thread delivers what one
// core can copy, well short of what PCIe carries. Each worker takes requests from one shared
// queue, a few at a time, and keeps its own reader fed; completed requests go back to
// the caller through a second queue. Order is the caller's business (the loader hands
// batches over in order whatever order their files complete in).
//
// Thread-safety: Add, Wait, pending and CancelQueued are called by one thread (the
// loader's reader thread), as FileReader requires; the workers touch only the two queues,
// under mu_.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "base/thread_annotations.h"
#include "loader/file_reader.h"

namespace epochfs::loader {
namespace {

class ParallelReader final : public FileReader {
 public:
  ParallelReader(std::vector<std::unique_ptr<FileReader>> readers, unsigned depth_each)
      : depth_each_(std::max(1u, depth_each)), name_(readers.front()->name()) {
    for (auto& reader : readers) {
      workers_.emplace_back([this, r = std::move(reader)]() mutable { Work(std::move(r)); });
    }
  }

  ~ParallelReader() override {
    CancelQueued();
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& w : workers_) w.join();  // each lets its reads in flight land first
  }

  const char* name() const override { return name_; }

  void Add(ReadRequest* req) override {
    {
      MutexLock lock(mu_);
      queued_.push_back(req);
    }
    ++pending_;
    work_cv_.notify_one();
  }

  void Wait(std::vector<ReadRequest*>* done) override {
    if (pending_ == 0) return;
    MutexLock lock(mu_);
    while (done_.empty()) lock.Wait(done_cv_);
    pending_ -= done_.size();
    done->insert(done->end(), done_.begin(), done_.end());
    done_.clear();
  }

  size_t pending() const override { return pending_; }

  void CancelQueued() override {
    MutexLock lock(mu_);
    for (ReadRequest* req : queued_) {
      req->status = CancelledError(*req);
      done_.push_back(req);
    }
    queued_.clear();
    if (!done_.empty()) done_cv_.notify_one();
  }

 private:
  void Work(std::unique_ptr<FileReader> reader) {
    std::vector<ReadRequest*> finished;
    while (true) {
      {
        MutexLock lock(mu_);
        // Idle: wait for requests. Busy: take what there is, without waiting.
        while (reader->pending() == 0 && queued_.empty() && !stop_) lock.Wait(work_cv_);
        if (stop_ && reader->pending() == 0 && queued_.empty()) return;
        // A few at a time, so that one worker does not take a whole batch from the others.
        while (!queued_.empty() && reader->pending() < depth_each_) {
          reader->Add(queued_.front());
          queued_.pop_front();
        }
      }
      finished.clear();
      reader->Wait(&finished);
      if (finished.empty()) continue;
      MutexLock lock(mu_);
      done_.insert(done_.end(), finished.begin(), finished.end());
      done_cv_.notify_one();
    }
  }

  const unsigned depth_each_;
  const char* const name_;  // the workers' readers' ("io_uring", "pread")
  size_t pending_ = 0;  // the caller's thread only

  Mutex mu_;
  std::condition_variable work_cv_;  // requests queued, or stop
  std::condition_variable done_cv_;  // requests completed
  std::deque<ReadRequest*> queued_ GUARDED_BY(mu_);
  std::vector<ReadRequest*> done_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;  // last: they use everything above
};

}  // namespace

std::unique_ptr<FileReader> NewParallelReader(std::vector<std::unique_ptr<FileReader>> readers,
                                              unsigned depth_each) {
  if (readers.size() == 1) return std::move(readers.front());
  return std::make_unique<ParallelReader>(std::move(readers), depth_each);
}

}  // namespace epochfs::loader
