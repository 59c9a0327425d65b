// IsattyGuard: answers isatty() on this mount's files in the kernel, with no request.
//
// Python's buffered open() asks every file it opens isatty(): a TCGETS ioctl, which the
// kernel sends to a FUSE daemon as a request of its own (it never remembers a refusal),
// one round trip per opened file for nothing. Where the kernel runs the BPF LSM, a small
// program on the file_ioctl hook (daemon/bpf/isatty_guard.bpf.c) answers TCGETS with
// ENOTTY for the files of this mount only, before the ioctl reaches FUSE; every other
// ioctl, and every other filesystem, is untouched. Elsewhere `epochfs run`'s Python hook
// stays the cure (loader/python/epochfs/hook.py), and `epochfs status` says which.
//
// Lifetime: the program is attached by a BPF link that only this object holds (nothing
// is pinned), so it goes when the object does, at unmount, and when the daemon dies
// (the kernel closes its fds, kill -9 included): it never outlives its mount.
//
// Thread-safety: none needed; made and destroyed by the daemon's main thread.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"

namespace epochfs::daemon {

class IsattyGuard {
 public:
  // Loads the program for the filesystem with device `major`:`minor` (the FUSE mount's,
  // as /proc/self/mountinfo shows it) and attaches it. Errors say why not: kUnsupported
  // (built without libbpf, or the kernel runs no BPF LSM), kPermission (no CAP_BPF /
  // CAP_MAC_ADMIN), or the loader's error.
  static Result<std::unique_ptr<IsattyGuard>> Attach(uint32_t major, uint32_t minor);
  ~IsattyGuard();  // detaches
  IsattyGuard(const IsattyGuard&) = delete;
  IsattyGuard& operator=(const IsattyGuard&) = delete;

  // The name the program has in the kernel (bpftool prog show name ...).
  static constexpr const char* kProgramName = "epochfs_isatty";

 private:
  struct Loaded;
  explicit IsattyGuard(std::unique_ptr<Loaded> loaded);
  std::unique_ptr<Loaded> loaded_;
};

}  // namespace epochfs::daemon
