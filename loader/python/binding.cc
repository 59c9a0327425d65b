// The `epochfs._epochfs` extension: the C++ loader for Python, with batches handed out
// as DLPack capsules (no libtorch at build time). The friendly API is in
// epochfs/__init__.py.
//
// Every capsule holds a reference to its Batch; the batch's slot returns to the ring
// when the last tensor (and the Python batch object) made from it is gone. The GIL is
// released while waiting for a batch, starting or stopping an epoch.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "loader/backend.h"
#include "loader/image_ops.h"
#include "loader/loader.h"
#include "loader/pread_limit.h"
#include "loader/python/dlpack_abi.h"

namespace py = pybind11;
using namespace epochfs::loader;  // NOLINT: a binding file names everything from here

namespace {

[[noreturn]] void Raise(const Status& st) {
  PyObject* type = PyExc_RuntimeError;
  switch (st.code()) {
    case Code::kNotFound:
      type = PyExc_FileNotFoundError;
      break;
    case Code::kIoError:
    case Code::kStale:
      type = PyExc_OSError;
      break;
    case Code::kInvalidArgument:
      type = PyExc_ValueError;
      break;
    case Code::kNoMemory:
      type = PyExc_MemoryError;
      break;
    default:
      break;
  }
  if (type == PyExc_OSError || type == PyExc_FileNotFoundError) {
    // OSError(errno, message) so that e.errno works.
    // OSError(errno, ...) picks its subclass itself (e.g. IsADirectoryError).
    // A status that did not come from an errno still needs one for OSError.
    const int errno_value = st.err() != 0                     ? st.err()
                            : st.code() == Code::kNotFound ? ENOENT
                            : st.code() == Code::kStale    ? ESTALE
                                                           : EIO;
    PyObject* err = PyObject_CallFunction(type, "is", errno_value, st.message().c_str());
    if (err == nullptr) throw py::error_already_set();
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err)), err);
    Py_DECREF(err);
  } else {
    PyErr_SetString(type, st.message().c_str());
  }
  throw py::error_already_set();
}

template <typename T>
T Unwrap(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(r.value());
}

struct Managed {
  std::shared_ptr<const Batch> batch;
  std::vector<int64_t> shape, strides;
  dlpack::DLManagedTensor tensor;
};

void DeleteManaged(dlpack::DLManagedTensor* self) {
  delete static_cast<Managed*>(self->manager_ctx);  // may run without the GIL: no Python here
}

void CapsuleDestructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "used_dltensor")) return;  // a consumer owns it now
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  auto* t = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (t != nullptr) {
    t->deleter(t);
  } else {
    PyErr_WriteUnraisable(capsule);
  }
  PyErr_Restore(type, value, traceback);
}

py::capsule MakeCapsule(const std::shared_ptr<const Batch>& batch, const void* data, bool on_device,
                        dlpack::DLDataType dtype, std::vector<int64_t> shape) {
  auto* m = new Managed;
  m->batch = batch;
  m->shape = std::move(shape);
  m->strides.resize(m->shape.size());
  int64_t stride = 1;
  for (size_t i = m->shape.size(); i > 0; --i) {
    m->strides[i - 1] = stride;
    stride *= m->shape[i - 1];
  }
  dlpack::DLTensor& t = m->tensor.dl_tensor;
  t.data = const_cast<void*>(data);
  t.device = on_device ? dlpack::DLDevice{dlpack::kDLCUDA, batch->device_id()}
                       : dlpack::DLDevice{dlpack::kDLCPU, 0};
  t.ndim = static_cast<int32_t>(m->shape.size());
  t.dtype = dtype;
  t.shape = m->shape.data();
  t.strides = m->strides.data();
  t.byte_offset = 0;
  m->tensor.manager_ctx = m;
  m->tensor.deleter = DeleteManaged;
  PyObject* cap = PyCapsule_New(&m->tensor, "dltensor", CapsuleDestructor);
  if (cap == nullptr) {
    delete m;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

constexpr dlpack::DLDataType kInt64{dlpack::kDLInt, 64, 1};
constexpr dlpack::DLDataType kUInt8{dlpack::kDLUInt, 8, 1};

// A batch as seen from Python: capsules over its memory.
class PyBatch {
 public:
  explicit PyBatch(std::shared_ptr<const Batch> b) : b_(std::move(b)) {}
  size_t size() const { return b_->size(); }
  size_t index() const { return b_->index(); }
  uint64_t epoch() const { return b_->epoch(); }
  bool on_device() const { return b_->on_device(); }
  size_t data_bytes() const { return b_->data_bytes(); }

  // The data as one tensor: uint8[data_bytes] by default, or `shape` of a dtype given
  // as a DLPack (code, bits) pair, which must cover the data exactly.
  py::capsule data(std::optional<std::vector<int64_t>> shape, uint8_t code, uint8_t bits) const {
    if (!shape)
      return MakeCapsule(b_, b_->data(), b_->on_device(), kUInt8,
                         {static_cast<int64_t>(b_->data_bytes())});
    if (bits == 0 || bits % 8 != 0) throw py::value_error("dtype bits must be a multiple of 8");
    int64_t elems = 1;
    for (int64_t d : *shape) {
      if (d < 0) throw py::value_error("negative dimension");
      elems *= d;
    }
    if (static_cast<uint64_t>(elems) * (bits / 8) != b_->data_bytes()) {
      throw py::value_error("shape covers " + std::to_string(elems * (bits / 8)) +
                            " bytes but the batch holds " + std::to_string(b_->data_bytes()));
    }
    return MakeCapsule(b_, b_->data(), b_->on_device(), dlpack::DLDataType{code, bits, 1}, *shape);
  }
  py::capsule labels() const {
    return MakeCapsule(b_, b_->labels(), b_->on_device(), kInt64,
                       {static_cast<int64_t>(b_->size())});
  }
  py::capsule offsets() const { return Host(b_->offsets()); }
  py::capsule lengths() const { return Host(b_->lengths()); }
  py::capsule indices() const { return Host(b_->sample_indices()); }

 private:
  py::capsule Host(const int64_t* p) const {
    return MakeCapsule(b_, p, false, kInt64, {static_cast<int64_t>(b_->size())});
  }
  std::shared_ptr<const Batch> b_;
};

DeviceKind ParseDevice(const std::string& d) {
  if (d == "auto") return DeviceKind::kAuto;
  if (d == "cuda") return DeviceKind::kCuda;
  if (d == "cpu") return DeviceKind::kCpu;
  throw py::value_error("device must be 'auto', 'cuda' or 'cpu', not '" + d + "'");
}

IoBackend ParseIo(const std::string& io) {
  if (io == "auto") return IoBackend::kAuto;
  if (io == "io_uring") return IoBackend::kUring;
  if (io == "pread") return IoBackend::kPread;
  throw py::value_error("io must be 'auto', 'io_uring' or 'pread', not '" + io + "'");
}

}  // namespace

PYBIND11_MODULE(_epochfs, m) {
  m.doc() = "epochfs loader (C++ core); use the epochfs package, not this module";

  m.def(
      "scan_image_folder",
      [](const std::string& root) {
        Dataset ds = Unwrap(ScanImageFolder(root));
        return py::make_tuple(ds.files, ds.labels, ds.classes);
      },
      py::arg("root"), "(files, labels, classes) of an ImageFolder-style tree");
  m.def(
      "shard_order",
      [](const std::vector<int64_t>& order, int rank, int world_size, bool drop_last) {
        return Unwrap(ShardOrder(order, rank, world_size, drop_last));
      },
      py::arg("order"), py::arg("rank"), py::arg("world_size"), py::arg("drop_last") = false);
  m.def("shuffled_order", &ShuffledOrder, py::arg("n"), py::arg("seed"));
  m.def(
      "resize_normalize",
      [](const std::vector<int64_t>& flat_jobs, int32_t size, std::vector<float> mean,
         std::vector<float> inv_std, uintptr_t out, bool bfloat16, bool on_device,
         uintptr_t stream) {
        // 12 values a job, in ResizeJob's order.
        constexpr size_t kFields = 12;
        if (flat_jobs.size() % kFields != 0 || mean.size() != 3 || inv_std.size() != 3) {
          throw py::value_error("resize_normalize: 12 values a job, 3 means and 3 scales");
        }
        std::vector<ResizeJob> jobs(flat_jobs.size() / kFields);
        for (size_t i = 0; i < jobs.size(); ++i) {
          const int64_t* f = &flat_jobs[i * kFields];
          ResizeJob& j = jobs[i];
          j.src = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(f[0]));
          j.height = static_cast<int32_t>(f[1]);
          j.width = static_cast<int32_t>(f[2]);
          j.region_top = static_cast<int32_t>(f[3]);
          j.region_left = static_cast<int32_t>(f[4]);
          j.region_height = static_cast<int32_t>(f[5]);
          j.region_width = static_cast<int32_t>(f[6]);
          j.resized_height = static_cast<int32_t>(f[7]);
          j.resized_width = static_cast<int32_t>(f[8]);
          j.window_top = static_cast<int32_t>(f[9]);
          j.window_left = static_cast<int32_t>(f[10]);
          j.flip = static_cast<int32_t>(f[11]);
        }
        NormalizeParams params{};
        for (int c = 0; c < 3; ++c) {
          params.mean[c] = mean[c];
          params.inv_std[c] = inv_std[c];
        }
        const PixelType type = bfloat16 ? PixelType::kBFloat16 : PixelType::kFloat32;
        Status st;
        {
          py::gil_scoped_release release;
          st = on_device ? ResizeNormalizeCuda(jobs.data(), jobs.size(), size, params, type,
                                               reinterpret_cast<void*>(out),
                                               reinterpret_cast<void*>(stream))
                         : ResizeNormalizeHost(jobs.data(), jobs.size(), size, params, type,
                                               reinterpret_cast<void*>(out));
        }
        if (!st.ok()) Raise(st);
      },
      py::arg("jobs"), py::arg("size"), py::arg("mean"), py::arg("inv_std"), py::arg("out"),
      py::arg("bfloat16"), py::arg("on_device"), py::arg("stream") = 0,
      "Crops, resizes, flips and normalises a batch into `out` (loader/image_ops.h)");
  m.def(
      "parallel_pread",
      [](const std::vector<std::string>& files, unsigned threads, double seconds,
         uint64_t dest_bytes) {
        PreadRate r;
        {
          py::gil_scoped_release release;
          r = MeasureParallelPread(files, threads, seconds, dest_bytes);
        }
        return py::make_tuple(r.files, r.bytes, r.seconds);
      },
      py::arg("files"), py::arg("threads"), py::arg("seconds"), py::arg("dest_bytes"),
      "(files, bytes, seconds) read by `threads` threads with open/pread/close: the "
      "machine's own limit, for bench/loader_bench.py");
  m.def("cuda_compiled", &CudaCompiledIn);
  m.def("cuda_usable", [] {
    std::string why;
    bool ok = CudaUsable(&why);
    return py::make_tuple(ok, why);
  });
  m.def("live_buffer_bytes", &LiveBufferBytes, "bytes of batch buffers alive (for tests)");

  py::class_<PyBatch>(m, "Batch")
      .def_property_readonly("size", &PyBatch::size)
      .def_property_readonly("index", &PyBatch::index)
      .def_property_readonly("epoch", &PyBatch::epoch)
      .def_property_readonly("on_device", &PyBatch::on_device)
      .def_property_readonly("data_bytes", &PyBatch::data_bytes)
      .def("data", &PyBatch::data, py::arg("shape") = py::none(), py::arg("code") = 1,
           py::arg("bits") = 8)
      .def("labels", &PyBatch::labels)
      .def("offsets", &PyBatch::offsets)
      .def("lengths", &PyBatch::lengths)
      .def("indices", &PyBatch::indices);

  py::class_<Loader>(m, "Loader")
      .def(
          py::init([](std::vector<std::string> files, std::vector<int64_t> labels,
                      size_t batch_size, bool drop_last, const std::string& device, int cuda_device,
                      uint64_t record_offset, uint64_t record_bytes, size_t num_buffers,
                      unsigned queue_depth, const std::string& io, bool publish_plan,
                      unsigned reader_threads) {
            LoaderOptions o;
            o.files = std::move(files);
            o.labels = std::move(labels);
            o.batch_size = batch_size;
            o.drop_last = drop_last;
            o.device = ParseDevice(device);
            o.cuda_device = cuda_device;
            o.record_offset = record_offset;
            o.record_bytes = record_bytes;
            o.num_buffers = num_buffers;
            o.queue_depth = queue_depth;
            o.io = ParseIo(io);
            o.publish_plan = publish_plan;
            o.reader_threads = reader_threads;
            std::unique_ptr<Loader> loader;
            Status st;
            {
              py::gil_scoped_release release;
              auto r = Loader::Create(std::move(o));
              if (r.ok()) {
                loader = std::move(r.value());
              } else {
                st = r.status();
              }
            }
            if (!st.ok()) Raise(st);
            return loader;
          }),
          py::arg("files"), py::arg("labels"), py::arg("batch_size"), py::arg("drop_last"),
          py::arg("device"), py::arg("cuda_device"), py::arg("record_offset"),
          py::arg("record_bytes"), py::arg("num_buffers"), py::arg("queue_depth"), py::arg("io"),
          py::arg("publish_plan"), py::arg("reader_threads") = 0)
      .def(
          "start_epoch",
          [](Loader& l, std::vector<int64_t> order) {
            Status st;
            {
              py::gil_scoped_release release;
              st = l.StartEpoch(std::move(order));
            }
            if (!st.ok()) Raise(st);
          },
          py::arg("order"))
      .def(
          "next",
          [](Loader& l, uintptr_t stream) -> std::optional<PyBatch> {
            Result<std::shared_ptr<const Batch>> r = [&] {
              py::gil_scoped_release release;
              return l.Next(reinterpret_cast<void*>(stream));
            }();
            std::shared_ptr<const Batch> b = Unwrap(std::move(r));
            if (!b) return std::nullopt;
            return PyBatch(std::move(b));
          },
          py::arg("stream") = 0)
      .def("stop",
           [](Loader& l) {
             py::gil_scoped_release release;
             l.Stop();
           })
      .def("num_batches", &Loader::NumBatches)
      .def_property_readonly("num_files", &Loader::num_files)
      .def_property_readonly("on_device", &Loader::on_device)
      .def_property_readonly("device_id", &Loader::device_id)
      .def_property_readonly("io_backend", &Loader::io_backend)
      .def_property_readonly("reader_threads", &Loader::reader_threads)
      .def_property_readonly("plan_root", &Loader::plan_root)
      .def("stats", [](const Loader& l) {
        LoaderStats s = l.stats();
        py::dict d;
        d["epochs"] = s.epochs;
        d["batches"] = s.batches;
        d["files_read"] = s.files_read;
        d["bytes_read"] = s.bytes_read;
        d["plans_published"] = s.plans_published;
        d["plans_refused"] = s.plans_refused;
        d["consumer_wait_s"] = s.consumer_wait_s;
        return d;
      });
}
