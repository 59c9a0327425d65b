// flaky_source: a FUSE filesystem that shows a directory as it is, except that the N-th
// stat of each file made while the file is open fails with EBADFD, once.
//
// That is GlusterFS's open-behind race: its client answers an open at once and makes
// the brick's open later, and a stat that reaches it in between (its FUSE bridge stats
// through an open fd of the inode when there is one) fails with EBADFD ("remote_fd is
// -1"). The integration tests mount epochfs over this source to check that an open
// through epochfs still succeeds with the file's bytes.
//
// Usage: flaky_source BACKING_DIR MOUNTPOINT LOG_FILE [N] (N: 1 when not given; the
// first stat while open is an opener's check, later ones a reader's). Mounts and returns (the
// filesystem runs in the background); each failure it injects appends the file's path
// and a newline to LOG_FILE. Read-only; attributes are never cached by the kernel, so
// that every stat is a request.
#define FUSE_USE_VERSION 31
#include <dirent.h>
#include <fcntl.h>
#include <fuse.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <map>
#include <mutex>
#include <cstdlib>
#include <string>

namespace {

std::string backing;
std::string log_path;
std::mutex mu;
int fail_at = 1;
std::map<std::string, int> open_count;       // guarded by mu
std::map<std::string, int> stats_while_open;  // guarded by mu

std::string Backing(const char* path) { return backing + path; }

bool FailThisStat(const char* path) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = open_count.find(path);
  if (it == open_count.end() || it->second == 0) return false;
  if (++stats_while_open[path] != fail_at) return false;
  if (std::FILE* log = std::fopen(log_path.c_str(), "ae")) {
    std::fprintf(log, "%s\n", path);
    std::fclose(log);
  }
  return true;
}

int GetAttr(const char* path, struct stat* st, struct fuse_file_info* fi) {
  if (FailThisStat(path)) return -EBADFD;
  const int rc = fi != nullptr ? ::fstat(static_cast<int>(fi->fh), st)
                               : ::lstat(Backing(path).c_str(), st);
  return rc == 0 ? 0 : -errno;
}

int ReadDir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, struct fuse_file_info*,
            enum fuse_readdir_flags) {
  DIR* dir = ::opendir(Backing(path).c_str());
  if (dir == nullptr) return -errno;
  while (struct dirent* entry = ::readdir(dir)) {
    struct stat st {};
    st.st_ino = entry->d_ino;
    st.st_mode = static_cast<mode_t>(DTTOIF(entry->d_type));
    if (fill(buf, entry->d_name, &st, 0, static_cast<fuse_fill_dir_flags>(0)) != 0) break;
  }
  ::closedir(dir);
  return 0;
}

int Open(const char* path, struct fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  const int fd = ::open(Backing(path).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  fi->fh = static_cast<uint64_t>(fd);
  std::lock_guard<std::mutex> lock(mu);
  ++open_count[path];
  return 0;
}

int Read(const char*, char* buf, size_t size, off_t offset, struct fuse_file_info* fi) {
  const ssize_t n = ::pread(static_cast<int>(fi->fh), buf, size, offset);
  return n >= 0 ? static_cast<int>(n) : -errno;
}

int Release(const char* path, struct fuse_file_info* fi) {
  ::close(static_cast<int>(fi->fh));
  std::lock_guard<std::mutex> lock(mu);
  --open_count[path];
  return 0;
}

void* Init(struct fuse_conn_info*, struct fuse_config* config) {
  config->attr_timeout = 0;
  config->entry_timeout = 0;
  config->negative_timeout = 0;
  config->use_ino = 1;
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: %s BACKING_DIR MOUNTPOINT LOG_FILE [N]\n", argv[0]);
    return 2;
  }
  backing = argv[1];
  log_path = argv[3];
  if (argc == 5) fail_at = std::atoi(argv[4]);
  struct fuse_operations ops {};
  ops.getattr = GetAttr;
  ops.open = Open;
  ops.read = Read;
  ops.release = Release;
  ops.readdir = ReadDir;
  ops.init = Init;
  char* fuse_argv[] = {argv[0], argv[2], nullptr};
  return fuse_main(2, fuse_argv, &ops, nullptr);
}
