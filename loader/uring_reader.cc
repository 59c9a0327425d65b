// The io_uring FileReader (see file_reader.h).
//
// Each file is a small state machine on one "op" slot: openat -> (fstat check) -> read,
// repeated until the range is read -> close, every step an SQE whose user_data is the
// op's index. Up to queue_depth ops are active, so
// that many files are in flight; at most one SQE per op is outstanding, so a ring of
// queue_depth entries never runs out. Negative errnos from CQEs are turned into Status
// here and go no further.
#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>

#include "loader/file_reader.h"

namespace epochfs::loader {
namespace {

constexpr uint64_t kMaxRead = 1u << 30;  // one SQE reads at most this much

class UringReader final : public FileReader {
 public:
  explicit UringReader(unsigned depth) : ops_(depth) {
    free_ops_.reserve(depth);
    for (unsigned i = depth; i > 0; --i) free_ops_.push_back(i - 1);
  }

  // Sets the ring up; on failure the reader must be destroyed without use.
  Status Init() {
    int ret = io_uring_queue_init(static_cast<unsigned>(ops_.size()), &ring_, 0);
    if (ret < 0) return Status::FromErrno(-ret, "io_uring_queue_init");
    initialized_ = true;
    io_uring_probe* probe = io_uring_get_probe_ring(&ring_);
    bool supported = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_OPENAT) &&
                     io_uring_opcode_supported(probe, IORING_OP_READ) &&
                     io_uring_opcode_supported(probe, IORING_OP_CLOSE);
    if (probe != nullptr) io_uring_free_probe(probe);
    if (!supported) return Status(Code::kUnsupported, "io_uring lacks openat/read/close", ENOSYS);
    return Status::Ok();
  }

  ~UringReader() override {
    if (!initialized_) return;
    // Reads in flight write into caller memory and hold fds: let them finish.
    CancelQueued();
    std::vector<ReadRequest*> ignored;
    while (pending() > 0) {
      ignored.clear();
      Wait(&ignored);
    }
    io_uring_queue_exit(&ring_);
  }

  const char* name() const override { return "io_uring"; }
  void Add(ReadRequest* req) override { queued_.push_back(req); }
  size_t pending() const override { return queued_.size() + active_ + finished_.size(); }

  void CancelQueued() override {
    for (ReadRequest* req : queued_) {
      req->status = CancelledError(*req);
      finished_.push_back(req);
    }
    queued_.clear();
  }

  void Wait(std::vector<ReadRequest*>* done) override {
    while (finished_.empty()) {
      StartQueued();
      if (active_ == 0) return;
      int ret = io_uring_submit_and_wait(&ring_, 1);
      if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
        // The ring itself failed: nothing in flight can be trusted to complete.
        FailEverything(Status::FromErrno(-ret, "io_uring_submit_and_wait"));
        break;
      }
      Reap();
    }
    done->insert(done->end(), finished_.begin(), finished_.end());
    finished_.clear();
  }

 private:
  enum class Stage { kOpen, kRead, kClose };
  struct Op {
    ReadRequest* req = nullptr;
    Stage stage = Stage::kOpen;
    int fd = -1;
    uint64_t done = 0;  // bytes of the range read so far
    Status status;
  };

  io_uring_sqe* GetSqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (sqe == nullptr) {  // not expected (one SQE per op), but never hand out null
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }

  void StartQueued() {
    while (!queued_.empty() && !free_ops_.empty()) {
      size_t index = free_ops_.back();
      free_ops_.pop_back();
      Op& op = ops_[index];
      op = Op();
      op.req = queued_.front();
      queued_.pop_front();
      ++active_;
      SubmitOpen(index);
    }
  }

  void SubmitOpen(size_t index) {
    Op& op = ops_[index];
    op.stage = Stage::kOpen;
    io_uring_sqe* sqe = GetSqe();
    io_uring_prep_openat(sqe, AT_FDCWD, op.req->path->c_str(), kSampleOpenFlags, 0);
    io_uring_sqe_set_data64(sqe, index);
  }

  void SubmitRead(size_t index) {
    Op& op = ops_[index];
    op.stage = Stage::kRead;
    ReadRequest& req = *op.req;
    io_uring_sqe* sqe = GetSqe();
    io_uring_prep_read(sqe, op.fd, req.dest + op.done,
                       static_cast<unsigned>(std::min<uint64_t>(req.length - op.done, kMaxRead)),
                       req.offset + op.done);
    io_uring_sqe_set_data64(sqe, index);
  }

  void SubmitClose(size_t index) {
    Op& op = ops_[index];
    op.stage = Stage::kClose;
    io_uring_sqe* sqe = GetSqe();
    io_uring_prep_close(sqe, op.fd);
    io_uring_sqe_set_data64(sqe, index);
  }

  void Finish(size_t index) {
    Op& op = ops_[index];
    op.req->status = std::move(op.status);
    finished_.push_back(op.req);
    op.req = nullptr;
    --active_;
    free_ops_.push_back(index);
  }

  void Fail(size_t index, Status status) {
    Op& op = ops_[index];
    op.status = std::move(status);
    if (op.fd >= 0) {
      SubmitClose(index);
    } else {
      Finish(index);
    }
  }

  void OnCompletion(size_t index, int res) {
    Op& op = ops_[index];
    ReadRequest& req = *op.req;
    switch (op.stage) {
      case Stage::kOpen:
        if (res == -EAGAIN || res == -EINTR) return SubmitOpen(index);
        if (res < 0) return Fail(index, Status::FromErrno(-res, "open " + *req.path));
        op.fd = res;
        if (Status st = CheckOpened(op.fd, req); !st.ok()) return Fail(index, std::move(st));
        if (req.length == 0) return SubmitClose(index);
        return SubmitRead(index);
      case Stage::kRead:
        if (res == -EAGAIN || res == -EINTR) return SubmitRead(index);
        if (res < 0) return Fail(index, Status::FromErrno(-res, "read " + *req.path));
        if (res == 0) return Fail(index, ShortReadError(req, op.done));
        op.done += static_cast<uint64_t>(res);
        if (op.done < req.length) return SubmitRead(index);  // a short read: the rest
        return SubmitClose(index);
      case Stage::kClose:
        // A read-only close has nothing to lose; its result is not the sample's.
        op.fd = -1;
        return Finish(index);
    }
  }

  void Reap() {
    io_uring_cqe* cqe;
    unsigned head;
    unsigned seen = 0;
    // Collect first: handling a completion may queue SQEs, never consume CQEs.
    std::vector<std::pair<size_t, int>>& batch = reaped_;
    batch.clear();
    io_uring_for_each_cqe(&ring_, head, cqe) {
      batch.emplace_back(static_cast<size_t>(io_uring_cqe_get_data64(cqe)), cqe->res);
      ++seen;
    }
    io_uring_cq_advance(&ring_, seen);
    for (auto [index, res] : batch) OnCompletion(index, res);
  }

  void FailEverything(const Status& status) {
    // Only reached if the ring is unusable; ops are abandoned with their fds closed
    // synchronously (the kernel holds its own references to in-flight files).
    for (size_t i = 0; i < ops_.size(); ++i) {
      Op& op = ops_[i];
      if (op.req == nullptr) continue;
      if (op.fd >= 0) {
        ::close(op.fd);
        op.fd = -1;
      }
      op.status = status;
      Finish(i);
    }
    CancelQueued();
  }

  io_uring ring_{};
  bool initialized_ = false;
  std::vector<Op> ops_;
  std::vector<size_t> free_ops_;
  std::deque<ReadRequest*> queued_;
  std::vector<ReadRequest*> finished_;
  std::vector<std::pair<size_t, int>> reaped_;
  size_t active_ = 0;
};

}  // namespace

std::unique_ptr<FileReader> NewUringReader(unsigned queue_depth, Status* why_not) {
  auto reader = std::make_unique<UringReader>(queue_depth == 0 ? 1 : queue_depth);
  Status s = reader->Init();
  if (!s.ok()) {
    *why_not = std::move(s);
    return nullptr;
  }
  return reader;
}

}  // namespace epochfs::loader
