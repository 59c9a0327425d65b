// UniqueFd: owns a file descriptor; closes it once. Private to loader/.
//
// Thread-safety: none; one owner.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "loader/loader.h"

namespace epochfs::loader {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  // Closes and ignores the result (read-only files: nothing to lose).
  void Reset() {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  }
  // Closes and reports a failure: for files whose close() carries a verdict (a written
  // plan file is applied, or refused, on close).
  Status Close(const std::string& context) {
    if (fd_ < 0) return Status::Ok();
    if (::close(std::exchange(fd_, -1)) != 0) return Status::FromErrno(errno, context);
    return Status::Ok();
  }

 private:
  int fd_ = -1;
};

}  // namespace epochfs::loader
