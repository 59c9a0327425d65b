// UniqueFd: sole owner of a file descriptor; closes it when it goes out of scope.
//
// Every fd the cache opens lives in one of these, so no error path leaks an fd and
// no code outside this class calls close(). Header-only and public: fs/ may use it.
//
// Thread-safety: like a unique_ptr. One owner; the fd itself may be used from many
// threads (pread/pwrite at explicit offsets) while the owner keeps it open.
#pragma once

#include <unistd.h>

#include <string>
#include <utility>

#include "base/status.h"

namespace epochfs {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }

  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }

  // Gives up ownership without closing.
  [[nodiscard]] int release() { return std::exchange(fd_, -1); }

  // Closes the current fd (if any) and takes ownership of `fd`. close() errors are
  // ignored on purpose: on Linux the fd is released even when close() fails, and
  // retrying would close someone else's fd. Data that must be durable is synced
  // explicitly before this point.
  void reset(int fd = -1) {
    int old = std::exchange(fd_, fd);
    if (old >= 0) ::close(old);
  }

  // Closes now and reports a failure: for files whose close() carries a verdict (a
  // control file applies, or refuses, what was written to it when it is closed).
  Status Close(const std::string& context) {
    if (fd_ < 0) return Status::Ok();
    if (::close(std::exchange(fd_, -1)) != 0) return Status::FromErrno(errno, context);
    return Status::Ok();
  }

 private:
  int fd_ = -1;
};

}  // namespace epochfs
