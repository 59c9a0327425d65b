#include "base/status.h"

namespace epochfs {

namespace {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kNotFound:
      return "NotFound";
    case Code::kIoError:
      return "IoError";
    case Code::kCorruption:
      return "Corruption";
    case Code::kNoSpace:
      return "NoSpace";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kBusy:
      return "Busy";
    case Code::kStale:
      return "Stale";
    case Code::kPermission:
      return "Permission";
    case Code::kUnsupported:
      return "Unsupported";
    case Code::kNoMemory:
      return "NoMemory";
    case Code::kDeviceError:
      return "DeviceError";
  }
  return "Unknown";
}

}  // namespace

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out = CodeName(code_);
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

int Status::DefaultErrno(Code code) {
  switch (code) {
    case Code::kOk:
      return 0;
    case Code::kNotFound:
      return ENOENT;
    case Code::kIoError:
      return EIO;
    case Code::kCorruption:
      return EIO;  // the caller sees a failed read, not bad bytes
    case Code::kNoSpace:
      return ENOSPC;
    case Code::kInvalidArgument:
      return EINVAL;
    case Code::kBusy:
      return EAGAIN;
    case Code::kStale:
      return ESTALE;
    case Code::kPermission:
      return EACCES;
    case Code::kUnsupported:
      return ENOSYS;
    case Code::kNoMemory:
      return ENOMEM;
    case Code::kDeviceError:
      return EIO;
  }
  return EIO;
}

}  // namespace epochfs
