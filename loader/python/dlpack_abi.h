// The DLPack C ABI (the unversioned DLManagedTensor of DLPack 0.x), written out from the
// public spec (dmlc/dlpack include/dlpack/dlpack.h) so that no header package is needed.
// torch.utils.dlpack.from_dlpack consumes a PyCapsule named "dltensor" holding a
// DLManagedTensor*, renames it "used_dltensor" and calls `deleter` when the tensor dies;
// torch 1.10+ and 2.x all accept this form.
#pragma once

#include <cstdint>

namespace epochfs::loader::dlpack {

enum DeviceType : int32_t { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 };
enum TypeCode : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 };

struct DLDevice {
  int32_t device_type;  // DeviceType
  int32_t device_id;
};

struct DLDataType {
  uint8_t code;  // TypeCode
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; may be null (compact row-major), we always set it
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

static_assert(sizeof(DLDevice) == 8);
static_assert(sizeof(DLDataType) == 4);
static_assert(sizeof(DLTensor) == 48);
static_assert(sizeof(DLManagedTensor) == 64);

}  // namespace epochfs::loader::dlpack
