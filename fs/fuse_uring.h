// FuseUring: FUSE requests served through io_uring instead of read(2) and writev(2) on
// /dev/fuse (Linux 6.14 and later, when the administrator has set the fuse module's
// `enable_uring` parameter).
//
// Why: on /dev/fuse every request costs the daemon two system calls (a read that sleeps
// until the next request, a writev for the reply), and any worker may take a request
// sent from any CPU. Over io_uring the reply and the wait for the next request are one
// system call, and the kernel hands a request to a queue of the CPU that sent it.
//
// How it fits libfuse 3.14, which knows nothing of it: the INIT reply hook
// (fs/init_reply.h) asks for FUSE_OVER_IO_URING when the kernel offers it and the rings
// below could be made; after INIT each worker thread registers one ring entry (a header
// and a payload buffer) with one of the kernel's queues, one queue per possible CPU.
// A request that arrives in an entry is laid out as libfuse expects it from read(2) and
// handed to fuse_session_process_buf; libfuse's reply comes back through the custom-IO
// writev hook, which copies it into the entry (CaptureReply) instead of writing it to
// /dev/fuse; the worker then commits it and fetches the next request in one submission.
// What the kernel still sends on /dev/fuse (FORGET, INTERRUPT, and every request until
// all queues have an entry) and every notification the daemon writes keep using
// libfuse's own loop and plain writev.
//
// A handler may also answer later from another thread (fs/waiting_room.h): its worker
// then waits for that answer. A worker may also wait in the kernel, in a notification
// it writes (a page store or drop waits for the page locks of READs in flight). Either
// wait may wait for a READ sent to the worker's own queue, and only that queue's workers
// answer it: a keeper thread adds a worker to a queue whose workers all wait so (see
// Keep). (A worker never has two entries: the kernel may give a free entry a request
// while its worker is busy, and that request could wait for a request that waits for
// it.)
//
// Thread-safety: Create, Start and Stop from one thread; CaptureReply from any.
#pragma once

#include <fuse_lowlevel.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"

namespace epochfs::fs {

class FuseUring {
 public:
  // Makes `threads_per_queue` worker threads for every one of the kernel's queues (one
  // per possible CPU), each with its own ring and buffers, before INIT is answered: once
  // the INIT reply asks for io_uring, the kernel holds every new request until every
  // queue has an entry, so whatever can fail must fail before that.
  // `payload_size`: the largest request or reply body, from the INIT reply (max_write,
  // max_pages).
  // `mountpoint`: where the session is mounted (see Kick).
  static Result<std::unique_ptr<FuseUring>> Create(struct fuse_session* session,
                                                   std::string mountpoint,
                                                   unsigned threads_per_queue,
                                                   size_t payload_size);
  ~FuseUring();  // Stop()
  FuseUring(const FuseUring&) = delete;
  FuseUring& operator=(const FuseUring&) = delete;

  // After the INIT reply is written: the workers register their entries.
  void Start();
  // Ends the workers (they also end on their own when the connection goes).
  void Stop();

  // Called from the custom-IO writev hook: when `iov` is the reply to the request the
  // calling worker is handling, copies it into that request's entry and returns its
  // length; otherwise returns -1 and the caller writes it to /dev/fuse.
  static ssize_t CaptureReply(const struct iovec* iov, int count);
  // Writes a notification (a page store, an invalidation) to /dev/fuse, telling the
  // keeper while a worker waits in it.
  static ssize_t WriteNotification(int fd, const struct iovec* iov, int count);

  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  unsigned queues() const { return queues_; }

  struct Worker;  // a thread, its ring and its one entry (fuse_uring.cc)

 private:
  FuseUring(struct fuse_session* session, std::string mountpoint, unsigned queues,
            size_t payload_size);
  // Starts a worker for queue `qid`; the future is ready once its ring is made (and, on a
  // started ring, its entry registered).
  std::future<Status> AddWorker(unsigned qid);
  void Run(Worker& worker, const std::function<void()>& ready);
  // The keeper: a queue whose workers all wait on something that may wait for a request
  // of that queue (a READ from the same CPU) gets one more worker. The kernel queues a
  // request per CPU and gives a newly registered entry only requests sent after it, so
  // after adding, Kick makes every queue commit once.
  void Keep();
  // A request from CPU `qid` (a STATFS of the mountpoint), on a thread of its own.
  void Kick(unsigned qid) const;
  void Handle(Worker& worker);  // leaves the reply in the worker's entry

  struct fuse_session* const session_;
  const std::string mountpoint_;
  const unsigned queues_;
  std::atomic<bool> started_{false}, stopping_{false};
  const size_t payload_size_;
  std::atomic<uint64_t> requests_{0};
  std::thread keeper_;
  std::mutex workers_mu_;
  std::vector<std::unique_ptr<Worker>> workers_;  // GUARDED_BY(workers_mu_); never shrinks
};

}  // namespace epochfs::fs
