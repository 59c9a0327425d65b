// The pread FileReader and what both readers share (see file_reader.h).
#include "loader/file_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <deque>

#include "base/unique_fd.h"

namespace epochfs::loader {

Status CheckOpened(int fd, const ReadRequest& req) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "fstat " + *req.path);
  if (!S_ISREG(st.st_mode)) {
    bool dir = S_ISDIR(st.st_mode);
    return Status(Code::kIoError,
                  *req.path + ": not a regular file any more (" +
                      (dir ? "a directory" : "a special file") + ")",
                  dir ? EISDIR : EINVAL);
  }
  if (static_cast<uint64_t>(st.st_size) != req.file_size) {
    return Status(Code::kStale,
                  *req.path + ": is now " + std::to_string(st.st_size) + " bytes but was " +
                      std::to_string(req.file_size) + " when listed (changed since?)",
                  EIO);
  }
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK)) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return Status::Ok();
}

Status ShortReadError(const ReadRequest& req, uint64_t got) {
  return Status(Code::kStale,
                *req.path + ": short read: the file ends at byte " +
                    std::to_string(req.offset + got) + " but was " + std::to_string(req.file_size) +
                    " bytes when listed (truncated since?)",
                EIO);
}

Status CancelledError(const ReadRequest& req) {
  return Status(Code::kIoError, *req.path + ": read cancelled", ECANCELED);
}

namespace {

class PreadReader final : public FileReader {
 public:
  const char* name() const override { return "pread"; }
  void Add(ReadRequest* req) override { queued_.push_back(req); }
  size_t pending() const override { return queued_.size() + cancelled_.size(); }

  void CancelQueued() override {
    for (ReadRequest* req : queued_) {
      req->status = CancelledError(*req);
      cancelled_.push_back(req);
    }
    queued_.clear();
  }

  void Wait(std::vector<ReadRequest*>* done) override {
    if (!cancelled_.empty()) {
      done->insert(done->end(), cancelled_.begin(), cancelled_.end());
      cancelled_.clear();
      return;
    }
    if (queued_.empty()) return;
    ReadRequest* req = queued_.front();
    queued_.pop_front();
    req->status = ReadOne(*req);
    done->push_back(req);
  }

 private:
  static Status ReadOne(const ReadRequest& req) {
    UniqueFd fd(::open(req.path->c_str(), kSampleOpenFlags));
    if (!fd.valid()) return Status::FromErrno(errno, "open " + *req.path);
    EPOCHFS_LOADER_RETURN_IF_ERROR(CheckOpened(fd.get(), req));
    uint64_t done = 0;
    while (done < req.length) {
      ssize_t n = ::pread(fd.get(), req.dest + done, req.length - done,
                          static_cast<off_t>(req.offset + done));
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return Status::FromErrno(errno, "read " + *req.path);
      }
      if (n == 0) return ShortReadError(req, done);
      done += static_cast<uint64_t>(n);
    }
    return Status::Ok();
  }

  std::deque<ReadRequest*> queued_;
  std::vector<ReadRequest*> cancelled_;
};

}  // namespace

std::unique_ptr<FileReader> NewPreadReader() { return std::make_unique<PreadReader>(); }

}  // namespace epochfs::loader
