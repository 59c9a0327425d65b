// Status and Result<T>: errors as values with context.
//
// Every fallible operation below fs/ returns one of these instead of -1/errno, so
// a failure carries what happened ("pack 12 offset 4096: checksum mismatch") up to
// the layer that decides what to do about it. fs/ maps a Status to an errno in one
// place (fs::ToErrno in fs/fuse_ops.cc). No exceptions on the request path.
//
// Thread-safety: values; safe to copy between threads.
#pragma once

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace epochfs {

enum class Code {
  kOk = 0,
  kNotFound,         // no such entry/file
  kIoError,          // the device or source failed (EIO, ...)
  kCorruption,       // bytes on disk do not match their checksum or format
  kNoSpace,          // the cache disk is full (ENOSPC, EDQUOT) or a budget refuses
  kInvalidArgument,  // the caller asked for something malformed
  kBusy,             // try again later (EAGAIN, a full queue)
  kStale,            // the source changed underneath (identity mismatch)
  kPermission,       // EACCES/EPERM from the source
  kUnsupported,      // a kernel feature (or device) is missing
  kNoMemory,         // a host, pinned or device allocation failed
  kDeviceError,      // a GPU call failed
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  // `err` is the errno behind it, if it came from one (0: none).
  Status(Code code, std::string msg, int err = 0)
      : code_(code), err_(err), message_(std::move(msg)) {}
  static Status Ok() { return Status(); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status IoError(std::string msg, int err = 0) {
    return Status(Code::kIoError, std::move(msg), err);
  }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status NoSpace(std::string msg) { return Status(Code::kNoSpace, std::move(msg)); }
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg));
  }
  static Status Busy(std::string msg) { return Status(Code::kBusy, std::move(msg)); }
  static Status Stale(std::string msg) { return Status(Code::kStale, std::move(msg)); }
  static Status Unsupported(std::string msg) {
    return Status(Code::kUnsupported, std::move(msg));
  }

  // Maps an errno (positive) to the closest code and keeps the errno for fs/.
  static Status FromErrno(int err, std::string context) {
    Code code = Code::kIoError;
    switch (err) {
      case ENOENT:
      case ENOTDIR: code = Code::kNotFound; break;
      case ENOMEM: code = Code::kNoMemory; break;
      case ENOSPC:
      case EDQUOT: code = Code::kNoSpace; break;
      case EINVAL: code = Code::kInvalidArgument; break;
      case EAGAIN: code = Code::kBusy; break;
      case ESTALE: code = Code::kStale; break;
      case EACCES:
      case EPERM: code = Code::kPermission; break;
      case ENOSYS:
      case EOPNOTSUPP: code = Code::kUnsupported; break;
      default: break;
    }
    return Status(code, context + ": " + std::strerror(err), err);
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  // The errno this status came from (0 when ok or when it did not come from one).
  int err() const { return err_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

  // Discards an error on purpose; the call site says why by calling this.
  void IgnoreError() const {}

 private:
  Code code_ = Code::kOk;
  int err_ = 0;
  std::string message_;
};

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit on purpose

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace epochfs

// Returns early from the enclosing function with the status when it is not ok.
#define EPOCHFS_RETURN_IF_ERROR(expr)        \
  do {                                       \
    ::epochfs::Status _st = (expr);          \
    if (!_st.ok()) return _st;               \
  } while (0)
