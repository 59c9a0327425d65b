// InstallInitReplyHook: asks the kernel, in the INIT reply, for what libfuse 3.14 cannot
// ask for itself.
//
// - FUSE_PARALLEL_DIROPS: LOOKUPs and READDIRs of one directory sent in parallel.
//   libfuse before 3.17.1 (Debian bookworm ships 3.14) sets FUSE_CAP_PARALLEL_DIROPS in
//   `want` by default but never puts the flag in its INIT reply (fixed upstream in
//   c9905341, "Pass FUSE_PARALLEL_DIROPS to kernel"). Without it the kernel holds a
//   directory's mutex across every LOOKUP and READDIR in it (fuse_lock_inode): readers
//   opening files of one folder wait for each other's LOOKUPs, and all of them for a
//   READDIRPLUS of that folder. After a restart each of those reads the folder's
//   metadata from a cold source (docs/benchmarks.md, "Where issue 16's targets stand").
//   The daemon's side is ready: every LOOKUP and READDIR locks what it shares
//   (InodeTable), as it already must for lookups in different directories.
// - FUSE_PASSTHROUGH (Linux 6.9 and later, when asked: `--passthrough`): an OPEN reply may
//   name a source file registered with the connection, which the kernel then reads
//   itself, with no READ to the daemon (fs/passthrough.h). libfuse 3.14 has no way to
//   ask for it (a flag of INIT's second flags word, and the stacking depth it needs).
// - FUSE_OVER_IO_URING (Linux 6.14 and later, with the fuse module's enable_uring set):
//   requests come through io_uring rings the hook makes before it asks (fs/fuse_uring.h);
//   the writev hook also hands each reply to such a request to its ring.
//
// How: libfuse 3.14's custom IO (fuse_session_custom_io) passes every request read
// from /dev/fuse and every reply written to it through two hooks. The read hook notes
// the INIT request's id and what the kernel offered; the writev hook adds the flags to
// that one reply. Every other message passes unchanged: one comparison per request,
// nothing per reply once INIT is answered. A libfuse that sends a flag itself is left as
// it is (the OR changes nothing).
//
// Thread-safety: install once per process, before the session's loop runs.
#pragma once

#include <fuse_lowlevel.h>

#include <string>

#include "base/status.h"

namespace epochfs::fs {

struct InitWishes {
  bool passthrough = false;  // ask for FUSE_PASSTHROUGH where the kernel offers it
  // Ask for FUSE_OVER_IO_URING where the kernel offers it, with this many worker threads
  // per queue (fs/fuse_uring.h); 0: never.
  unsigned uring_threads_per_queue = 0;
  std::string mountpoint;  // where the session is mounted (fs/fuse_uring.h's Kick)
};

// Installs the hooks on `session`, mounted (fuse_session_mount) and not yet looping.
Status InstallInitReplyHook(struct fuse_session* session, InitWishes wishes);

// What the session's INIT reply carried: false until INIT is answered, and where the
// kernel did not offer it (or it was not wished for).
bool ParallelDiropsGranted();
bool PassthroughGranted();
// Whether requests come through io_uring (fs/fuse_uring.h), and how many have.
bool FuseUringGranted();
uint64_t FuseUringRequests();
// Ends the io_uring workers; after the session's loop has returned.
void StopFuseUring();

}  // namespace epochfs::fs
