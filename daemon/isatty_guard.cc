#include "daemon/isatty_guard.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

#ifdef EPOCHFS_HAVE_BPF
#include <bpf/libbpf.h>

#include "daemon/bpf/isatty_guard.skel.h"
#endif

namespace epochfs::daemon {

#ifdef EPOCHFS_HAVE_BPF

struct IsattyGuard::Loaded {
  isatty_guard_bpf* skel = nullptr;
  ~Loaded() { isatty_guard_bpf__destroy(skel); }  // detaches the link, frees the program
};

namespace {

// libbpf's own messages go to the debug log: the error value says what went wrong.
int LibbpfLog(enum libbpf_print_level level, const char* format, va_list args) {
  if (level == LIBBPF_DEBUG) return 0;
  char line[512];
  std::vsnprintf(line, sizeof(line), format, args);
  spdlog::debug("libbpf: {}", line);
  return 0;
}

Status LoadError(int err, const char* step) {
  err = err < 0 ? -err : err;
  if (err == EPERM || err == EACCES) {
    // Root lacking CAP_BPF, CAP_PERFMON or CAP_MAC_ADMIN, or a kernel policy that allows
    // no tracing programs at all (some VM and container kernels).
    return Status::FromErrno(
        err, fmt::format("{} the BPF program: refused (needs CAP_BPF, CAP_PERFMON, CAP_MAC_ADMIN and a "
                         "kernel that allows tracing programs)",
                         step));
  }
  if (err == EOPNOTSUPP || err == ENOTSUP || err == EINVAL || err == ENOENT || err == ESRCH) {
    // The hook exists only where the kernel was built with the BPF LSM and boots with
    // "bpf" in its lsm= list.
    return Status::Unsupported(
        fmt::format("{} the BPF program: the kernel runs no BPF LSM ({})", step, std::strerror(err)));
  }
  return Status::FromErrno(err, fmt::format("{} the BPF program", step));
}

}  // namespace

Result<std::unique_ptr<IsattyGuard>> IsattyGuard::Attach(uint32_t major, uint32_t minor) {
  libbpf_set_print(LibbpfLog);
  auto loaded = std::make_unique<Loaded>();
  loaded->skel = isatty_guard_bpf__open();
  if (loaded->skel == nullptr) return LoadError(errno, "open");
  // The kernel's dev_t, as the superblock holds it (MKDEV: 20 bits of minor).
  loaded->skel->rodata->target_dev = (major << 20) | minor;
  if (int err = isatty_guard_bpf__load(loaded->skel); err != 0) return LoadError(err, "load");
  if (int err = isatty_guard_bpf__attach(loaded->skel); err != 0) return LoadError(err, "attach");
  return std::unique_ptr<IsattyGuard>(new IsattyGuard(std::move(loaded)));
}

#else  // built without libbpf

struct IsattyGuard::Loaded {};

Result<std::unique_ptr<IsattyGuard>> IsattyGuard::Attach(uint32_t, uint32_t) {
  return Status::Unsupported("not built (no clang, bpftool or libbpf-dev when epochfs was built)");
}

#endif

IsattyGuard::IsattyGuard(std::unique_ptr<Loaded> loaded) : loaded_(std::move(loaded)) {}
IsattyGuard::~IsattyGuard() = default;

}  // namespace epochfs::daemon
