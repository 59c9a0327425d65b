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

}  // namespace epochfs
