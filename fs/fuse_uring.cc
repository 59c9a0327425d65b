#include "fs/fuse_uring.h"

#include <liburing.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace epochfs::fs {
namespace {

// From the kernel's include/uapi/linux/fuse.h (protocol 7.42), newer than bookworm's
// linux-libc-dev.
constexpr uint32_t kCmdRegister = 1;        // FUSE_IO_URING_CMD_REGISTER
constexpr uint32_t kCmdCommitAndFetch = 2;  // FUSE_IO_URING_CMD_COMMIT_AND_FETCH
constexpr size_t kInOutSize = 128;          // FUSE_URING_IN_OUT_HEADER_SZ
constexpr size_t kOpInSize = 128;           // FUSE_URING_OP_IN_OUT_SZ

struct EntryInOut {  // struct fuse_uring_ent_in_out
  uint64_t flags;
  uint64_t commit_id;
  uint32_t payload_sz;
  uint32_t padding;
  uint64_t reserved;
};
struct RequestHeader {  // struct fuse_uring_req_header
  char in_out[kInOutSize];
  char op_in[kOpInSize];
  EntryInOut ring_ent_in_out;
};
struct CommandRequest {  // struct fuse_uring_cmd_req, in the SQE's command area
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;
  uint8_t padding[6];
};

// The kernel's queues: one per possible CPU (num_possible_cpus()), numbered from 0.
unsigned PossibleCpus() {
  // A list such as "0-7" or "0-3,6-7"; the kernel counts its CPUs (num_possible_cpus).
  std::ifstream in("/sys/devices/system/cpu/possible");
  std::string list;
  if (in >> list) {
    unsigned count = 0;
    std::istringstream ranges(list);
    std::string range;
    try {
      while (std::getline(ranges, range, ',')) {
        const auto dash = range.find('-');
        const unsigned long first = std::stoul(range.substr(0, dash));
        const unsigned long last =
            dash == std::string::npos ? first : std::stoul(range.substr(dash + 1));
        count += static_cast<unsigned>(last - first + 1);
      }
      if (count > 0) return count;
    } catch (const std::exception&) {
    }
  }
  return static_cast<unsigned>(std::max(1L, ::sysconf(_SC_NPROCESSORS_CONF)));
}

// Where the request's fuse_in_header and per-op header are put, just before its payload,
// so that libfuse reads one contiguous request as from /dev/fuse with no copy of the
// payload (a WRITE's data).
constexpr size_t kPrefix = 4096;

// The errors with which the kernel ends a worker's command when the connection goes.
bool ConnectionGone(int res) {
  return res == -ENOTCONN || res == -ECONNABORTED || res == -ECANCELED || res == -ENODEV ||
         res == -EBADF;
}

}  // namespace

// One ring entry: a header buffer and a payload buffer registered with one of the
// kernel's queues, holding one request at a time.
struct UringEntry {
  char* region = nullptr;  // header page, the prefix, then the payload
  size_t region_size = 0;
  RequestHeader* header = nullptr;
  char* payload = nullptr;
  size_t payload_size = 0;
  struct iovec iov[2]{};

  ~UringEntry() {
    if (region != nullptr) ::munmap(region, region_size);
  }
};

// A thread, its ring, and its one entry: a worker whose request waits never holds up
// another (the kernel gives an entry a request only once it is committed).
struct FuseUring::Worker {
  unsigned qid = 0;
  struct io_uring ring {};
  bool ring_made = false;
  UringEntry entry;
  // The request being handled; under Replies' lock once it may be answered elsewhere.
  uint64_t unique = 0;
  bool replied = false;
  std::condition_variable answered;
  // For the keeper: waiting for a request (its entry is the kernel's to give one), and
  // since when (steady-clock ns; 0: not) it waits on something that may wait for a request
  // of its queue (an answer from another thread, a notification's page locks).
  std::atomic<bool> idle{false};
  std::atomic<int64_t> stalled_since{0};
  std::thread thread;

  ~Worker() {
    if (ring_made) io_uring_queue_exit(&ring);
  }
};

namespace {

thread_local FuseUring::Worker* current_worker = nullptr;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The requests being handled, by id, for a reply given on a thread other than the
// worker's (fs/waiting_room.h): it must find the request's entry.
struct Replies {
  std::mutex mu;
  std::unordered_map<uint64_t, FuseUring::Worker*> by_unique;
};
Replies& replies() {
  static Replies* r = new Replies;  // outlives every thread that may reply
  return *r;
}

// The worker's ring of 128-byte SQEs (the command area holds fuse_uring_cmd_req) and its
// entry's buffers.
Status MakeRing(FuseUring::Worker& w, size_t payload_size) {
  const int rc = io_uring_queue_init(4, &w.ring, IORING_SETUP_SQE128);
  if (rc < 0) return Status::FromErrno(-rc, "make an io_uring for FUSE requests");
  w.ring_made = true;
  UringEntry& e = w.entry;
  const size_t page = 4096;
  e.region_size = page + kPrefix + payload_size;
  void* region =
      ::mmap(nullptr, e.region_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (region == MAP_FAILED) return Status::FromErrno(errno, "map a FUSE ring's buffers");
  e.region = static_cast<char*>(region);
  e.header = reinterpret_cast<RequestHeader*>(e.region);
  e.payload = e.region + page + kPrefix;
  e.payload_size = payload_size;
  e.iov[0] = {e.header, sizeof(RequestHeader)};
  e.iov[1] = {e.payload, payload_size};
  return Status::Ok();
}

// Queues a command for the worker's entry; submitted by its next wait. Its ring has room:
// a worker has one command in flight at most.
void PrepCommand(FuseUring::Worker& w, int fd, uint32_t op, uint64_t commit_id) {
  struct io_uring_sqe* sqe = io_uring_get_sqe(&w.ring);
  if (sqe == nullptr) std::abort();
  std::memset(static_cast<void*>(sqe), 0, 2 * sizeof(*sqe));  // SQE128: command area after
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fd;
  sqe->addr = reinterpret_cast<uintptr_t>(w.entry.iov);
  sqe->len = 2;
  sqe->cmd_op = op;
  sqe->user_data = op;
  const CommandRequest req{
      .flags = 0, .commit_id = commit_id, .qid = static_cast<uint16_t>(w.qid), .padding = {}};
  std::memcpy(sqe->cmd, &req, sizeof(req));
}

// An error reply in the entry: its header only.
void PutError(UringEntry& e, uint64_t unique, int error) {
  fuse_out_header out{};
  out.len = sizeof(out);
  out.error = -error;
  out.unique = unique;
  std::memcpy(e.header->in_out, &out, sizeof(out));
  e.header->ring_ent_in_out.payload_sz = 0;
}

// Copies a reply into `e`: its header where the kernel reads fuse_out_header, the rest
// into the payload buffer. Returns the reply's length.
ssize_t PutReply(UringEntry& e, const fuse_out_header& out, const struct iovec* iov, int count) {
  size_t copied = 0;
  for (int i = 1; i < count; i++) {
    if (copied + iov[i].iov_len > e.payload_size) {
      spdlog::error("a FUSE reply of {} bytes or more does not fit the ring's {} bytes",
                    copied + iov[i].iov_len, e.payload_size);
      PutError(e, out.unique, EIO);
      return static_cast<ssize_t>(out.len);
    }
    std::memcpy(e.payload + copied, iov[i].iov_base, iov[i].iov_len);
    copied += iov[i].iov_len;
  }
  std::memcpy(e.header->in_out, &out, sizeof(out));
  e.header->ring_ent_in_out.payload_sz = static_cast<uint32_t>(copied);
  return static_cast<ssize_t>(sizeof(out) + copied);
}

}  // namespace

FuseUring::FuseUring(struct fuse_session* session, std::string mountpoint, unsigned queues,
                     size_t payload_size)
    : session_(session),
      mountpoint_(std::move(mountpoint)),
      queues_(queues),
      payload_size_(payload_size) {}

Result<std::unique_ptr<FuseUring>> FuseUring::Create(struct fuse_session* session,
                                                     std::string mountpoint,
                                                     unsigned threads_per_queue,
                                                     size_t payload_size) {
  const unsigned queues = PossibleCpus();
  std::unique_ptr<FuseUring> uring(new FuseUring(session, std::move(mountpoint), queues,
                                                 (payload_size + 4095) / 4096 * 4096));
  std::vector<std::future<Status>> made;
  for (unsigned i = 0; i < queues * std::max(1u, threads_per_queue); i++) {
    made.push_back(uring->AddWorker(i % queues));
  }
  Status first_error = Status::Ok();
  for (auto& f : made) {
    Status st = f.get();
    if (!st.ok() && first_error.ok()) first_error = std::move(st);
  }
  if (!first_error.ok()) return first_error;  // ~FuseUring ends the threads
  return uring;
}

std::future<Status> FuseUring::AddWorker(unsigned qid) {
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> made = promise->get_future();
  std::lock_guard lock(workers_mu_);
  workers_.push_back(std::make_unique<Worker>());
  Worker& w = *workers_.back();
  w.qid = qid;
  w.thread = std::thread([this, &w, promise] {
    Status st = MakeRing(w, payload_size_);
    if (!st.ok()) return promise->set_value(std::move(st));
    Run(w, [promise] { promise->set_value(Status::Ok()); });
  });
  return made;
}

FuseUring::~FuseUring() { Stop(); }

void FuseUring::Start() {
  started_.store(true);
  keeper_ = std::thread([this] { Keep(); });
}

void FuseUring::Stop() {
  stopping_.store(true);
  if (keeper_.joinable()) keeper_.join();
  for (;;) {  // a worker may add another while it stops
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(workers_mu_);
      for (auto& w : workers_) {
        if (w->thread.joinable()) threads.push_back(std::move(w->thread));
      }
    }
    if (threads.empty()) return;
    for (auto& t : threads) t.join();
  }
}

ssize_t FuseUring::CaptureReply(const struct iovec* iov, int count) {
  if (count < 1 || iov[0].iov_len != sizeof(fuse_out_header)) return -1;
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof(out));
  if (out.unique == 0) return -1;  // a notification
  // The common case: the reply to the request this worker is handling, on its thread.
  if (Worker* w = current_worker; w != nullptr && w->unique == out.unique) {
    w->replied = true;
    return PutReply(w->entry, out, iov, count);
  }
  // From another thread: a request of some worker's entry, or one that came on /dev/fuse.
  Replies& r = replies();
  std::lock_guard lock(r.mu);
  const auto it = r.by_unique.find(out.unique);
  if (it == r.by_unique.end()) return -1;
  Worker& w = *it->second;
  r.by_unique.erase(it);
  const ssize_t n = PutReply(w.entry, out, iov, count);
  w.replied = true;
  w.answered.notify_one();
  return n;
}

void FuseUring::Handle(Worker& w) {
  UringEntry& e = w.entry;
  fuse_in_header in;
  std::memcpy(&in, e.header->in_out, sizeof(in));
  const size_t payload_size = e.header->ring_ent_in_out.payload_sz;
  const size_t fixed = sizeof(in) + payload_size;
  requests_.fetch_add(1, std::memory_order_relaxed);
  w.unique = in.unique;
  if (in.len < fixed || in.len - fixed > kOpInSize || payload_size > e.payload_size) {
    spdlog::error("FUSE io_uring worker {}: a request of {} bytes with a payload of {}", w.qid,
                  in.len, payload_size);
    PutError(e, in.unique, EIO);
    return;
  }
  // The request as read(2) would give it: headers just before the payload.
  const size_t op_size = in.len - fixed;
  char* const start = e.payload - op_size - sizeof(in);
  std::memcpy(start, &in, sizeof(in));
  std::memcpy(start + sizeof(in), e.header->op_in, op_size);
  struct fuse_buf buf {};
  buf.size = in.len;
  buf.mem = start;
  Replies& r = replies();
  {
    std::lock_guard lock(r.mu);
    w.replied = false;
    r.by_unique[in.unique] = &w;
  }
  current_worker = &w;
  fuse_session_process_buf(session_, &buf);
  current_worker = nullptr;
  std::unique_lock lock(r.mu);
  if (w.replied) {
    r.by_unique.erase(in.unique);
    return;
  }
  // Handed to another thread (fs/waiting_room.h), which answers it when it may. This
  // worker waits for that answer; should its queue have no other worker free meanwhile,
  // the keeper adds one (the answer may wait for a READ sent to this queue).
  w.stalled_since.store(NowNs());
  while (!w.replied && !stopping_.load()) {
    w.answered.wait_for(lock, std::chrono::milliseconds(200));
  }
  w.stalled_since.store(0);
}

ssize_t FuseUring::WriteNotification(int fd, const struct iovec* iov, int count) {
  // A store or an invalidation waits for the page locks of READs in flight, which a
  // worker of the READ's queue answers: on a worker the keeper watches the wait.
  Worker* w = current_worker;
  if (w != nullptr) w->stalled_since.store(NowNs());
  const ssize_t n = ::writev(fd, iov, count);
  if (w != nullptr) w->stalled_since.store(0);
  return n;
}

void FuseUring::Keep() {
  pthread_setname_np(pthread_self(), "fuse-uring-keep");
  // A stall that holds up a queue is rare (a drop racing READs of the pages it drops), and
  // a look every 50 ms costs little while requests flow.
  constexpr int64_t kStalledNs = 10'000'000;
  while (!stopping_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int64_t now = NowNs();
    std::vector<unsigned> starved;
    {
      std::lock_guard lock(workers_mu_);
      std::vector<unsigned> idle(queues_, 0), stalled(queues_, 0);
      for (const auto& w : workers_) {
        if (w->idle.load()) idle[w->qid]++;
        const int64_t since = w->stalled_since.load();
        if (since != 0 && now - since > kStalledNs) stalled[w->qid]++;
      }
      for (unsigned q = 0; q < queues_; q++) {
        if (stalled[q] > 0 && idle[q] == 0) starved.push_back(q);
      }
    }
    if (starved.empty()) continue;
    for (const unsigned q : starved) {
      if (Status st = AddWorker(q).get(); !st.ok()) {
        spdlog::warn("FUSE io_uring: another worker for queue {}: {}", q, st.ToString());
      } else {
        spdlog::info("FUSE io_uring: every worker of queue {} waited 10 ms on the kernel or "
                     "on another thread: added one", q);
      }
    }
    // A new entry takes only requests sent after it; the kernel hands those already
    // queued to the entries its workers commit. A request from each CPU makes its queue
    // commit, which fetches what waits there.
    for (unsigned q = 0; q < queues_; q++) Kick(q);
  }
}

void FuseUring::Kick(unsigned qid) const {
  std::thread([path = mountpoint_, qid] {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    CPU_SET(qid, &cpus);
    if (::sched_setaffinity(0, sizeof(cpus), &cpus) != 0) return;
    struct statfs st;
    (void)::statfs(path.c_str(), &st);  // a STATFS, which the kernel never caches
  }).detach();
}

void FuseUring::Run(Worker& w, const std::function<void()>& ready) {
  const std::string name = fmt::format("fuse-uring-{}", w.qid);
  pthread_setname_np(pthread_self(), name.c_str());
  const int fd = fuse_session_fd(session_);
  if (started_.load()) {
    // Added to a live ring: its entry is the kernel's once the REGISTER is submitted.
    PrepCommand(w, fd, kCmdRegister, 0);
    const int rc = io_uring_submit(&w.ring);
    ready();
    if (rc < 0) return;
  } else {
    ready();
    while (!started_.load() && !stopping_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    PrepCommand(w, fd, kCmdRegister, 0);
  }
  while (!stopping_.load(std::memory_order_relaxed)) {
    // A bounded wait, so that Stop() is seen even if the kernel never answers.
    struct __kernel_timespec timeout {.tv_sec = 0, .tv_nsec = 200'000'000};
    struct io_uring_cqe* cqe = nullptr;
    w.idle.store(true, std::memory_order_relaxed);
    const int rc = io_uring_submit_and_wait_timeout(&w.ring, &cqe, 1, &timeout, nullptr);
    w.idle.store(false, std::memory_order_relaxed);
    if (rc == -ETIME || rc == -EINTR || (rc >= 0 && cqe == nullptr)) continue;
    if (rc < 0) {
      spdlog::error("FUSE io_uring worker {}: wait: {}", w.qid, std::strerror(-rc));
      return;
    }
    const int res = cqe->res;
    io_uring_cqe_seen(&w.ring, cqe);
    if (res == -EAGAIN) {  // INIT not yet processed by the kernel
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      PrepCommand(w, fd, kCmdRegister, 0);
      continue;
    }
    if (res < 0) {
      if (ConnectionGone(res)) return;
      // The kernel let go of the entry (the commit of a request it had ended): register
      // it again, so that this worker's share of the queue stays served.
      spdlog::warn("FUSE io_uring worker {}: {}", w.qid, std::strerror(-res));
      PrepCommand(w, fd, kCmdRegister, 0);
      continue;
    }
    Handle(w);
    PrepCommand(w, fd, kCmdCommitAndFetch, w.unique);
  }
}

}  // namespace epochfs::fs
