// EnableParallelDirops: lets the kernel send LOOKUPs and READDIRs of one directory to the
// daemon in parallel, as the daemon asks it to (fs/fuse_ops.cc, DoInit).
//
// Why: libfuse before 3.17.1 (Debian bookworm ships 3.14) sets FUSE_CAP_PARALLEL_DIROPS
// in `want` by default but never puts FUSE_PARALLEL_DIROPS in its INIT reply (fixed
// upstream in c9905341, "Pass FUSE_PARALLEL_DIROPS to kernel"). Without it the kernel
// holds a directory's mutex across every LOOKUP and READDIR in it (fuse_lock_inode):
// readers opening files of one folder wait for each other's LOOKUPs, and all of them
// for a READDIRPLUS of that folder. After a restart each of those reads the folder's
// metadata from a cold source (docs/benchmarks.md, "Where issue 16's targets stand").
// The daemon's side is ready for parallel directory operations: every LOOKUP and
// READDIR locks what it shares (InodeTable), as it already must for lookups in
// different directories.
//
// How: libfuse 3.14's custom IO (fuse_session_custom_io) passes every request read
// from /dev/fuse and every reply written to it through two hooks. The read hook notes
// the INIT request's id and whether the kernel offered the flag; the writev hook adds
// the flag to that one reply. Every other message passes unchanged: one comparison per
// request, nothing per reply once INIT is answered. A libfuse that sends the flag
// itself is left as it is (the OR changes nothing).
//
// Thread-safety: install once per session, before its loop runs.
#pragma once

#include <fuse_lowlevel.h>

#include "base/status.h"

namespace epochfs::fs {

// Installs the hooks on `session`, mounted (fuse_session_mount) and not yet looping.
Status EnableParallelDirops(struct fuse_session* session);

// Whether a session's INIT reply carried FUSE_PARALLEL_DIROPS: false until INIT is
// answered, and where the kernel did not offer it.
bool ParallelDiropsGranted();

}  // namespace epochfs::fs
