// Status helpers for the loader (see loader.h).
#include <cstring>

#include "loader/loader.h"

namespace epochfs::loader {

Status Status::FromErrno(int err, const std::string& context) {
  Code code = Code::kIoError;
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      code = Code::kNotFound;
      break;
    case ENOMEM:
      code = Code::kNoMemory;
      break;
    case EINVAL:
      code = Code::kInvalidArgument;
      break;
    default:
      break;
  }
  return Status(code, context + ": " + std::strerror(err), err);
}

std::string Status::ToString() const {
  const char* name = "Ok";
  switch (code_) {
    case Code::kOk:
      return "Ok";
    case Code::kNotFound:
      name = "NotFound";
      break;
    case Code::kIoError:
      name = "IoError";
      break;
    case Code::kInvalidArgument:
      name = "InvalidArgument";
      break;
    case Code::kChanged:
      name = "Changed";
      break;
    case Code::kNoMemory:
      name = "NoMemory";
      break;
    case Code::kDeviceError:
      name = "DeviceError";
      break;
    case Code::kBusy:
      name = "Busy";
      break;
    case Code::kUnsupported:
      name = "Unsupported";
      break;
  }
  return std::string(name) + ": " + message_;
}

}  // namespace epochfs::loader
