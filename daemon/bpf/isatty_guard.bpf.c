// The kernel half of daemon/isatty_guard.h: a BPF LSM program on the file_ioctl hook
// that answers TCGETS on the files of one filesystem (this daemon's FUSE mount) with
// ENOTTY, so that the ioctl never becomes a FUSE request. Every other ioctl, and every
// other filesystem, goes on as if the program were not there.
//
// The structs below are the three fields the program reads, declared here rather than
// taken from a vmlinux.h generated on the build machine: preserve_access_index makes
// libbpf relocate each field to where the running kernel has it (CO-RE).
//
// The kernel loads LSM programs only with a GPL-compatible license.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct super_block {
  __u32 s_dev;  // dev_t: (major << 20) | minor
} __attribute__((preserve_access_index));

struct inode {
  struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct file {
  struct inode *f_inode;
} __attribute__((preserve_access_index));

#define TCGETS 0x5401
#define ENOTTY 25

// The mount's device, in the kernel's encoding; set before the program is loaded.
const volatile __u32 target_dev = 0;

SEC("lsm/file_ioctl")
int BPF_PROG(epochfs_isatty, struct file *file, unsigned int cmd, unsigned long arg, int ret) {
  if (ret != 0) return ret;  // an earlier LSM refused already
  if (cmd != TCGETS) return 0;
  if (file->f_inode->i_sb->s_dev != target_dev) return 0;
  return -ENOTTY;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
