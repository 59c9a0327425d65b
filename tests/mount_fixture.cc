#include "tests/mount_fixture.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

extern char** environ;

namespace epochfs::testing {

CommandResult Run(const std::vector<std::string>& args) {
  CommandResult result;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) < 0) return result;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    result.output = "spawn failed: " + std::string(strerror(rc));
    return result;
  }
  // The daemon inherits no copy of the pipe: epochfs's child redirects to /dev/null, so
  // EOF arrives when the foreground process exits.
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf, sizeof(buf))) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    result.output.append(buf, static_cast<size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

CommandResult Epochfs(const std::vector<std::string>& args) {
  std::vector<std::string> full = {EPOCHFS_BINARY};
  full.insert(full.end(), args.begin(), args.end());
  return Run(full);
}

bool FuseAvailable() {
  int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

Mount::Mount(const fsys::path& source, const fsys::path& mountpoint, const fsys::path& cache_dir,
             const std::vector<std::string>& extra)
    : mountpoint_(mountpoint) {
  std::vector<std::string> args = {"mount", source.string(), mountpoint.string(), "--cache-dir",
                                   cache_dir.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  // Small budgets unless the test sets its own.
  auto has = [&](const char* flag) { return std::find(extra.begin(), extra.end(), flag) != extra.end(); };
  if (!has("--ram")) args.insert(args.end(), {"--ram", "64M"});
  if (!has("--disk")) args.insert(args.end(), {"--disk", "512M"});
  CommandResult r = Epochfs(args);
  output_ = r.output;
  ok_ = r.exit_code == 0;
  mounted_ = ok_;
}

UnmountOnExit::~UnmountOnExit() {
  if (Epochfs({"umount", mountpoint_.string()}).exit_code != 0) {
    ::umount2(mountpoint_.c_str(), MNT_DETACH);
  }
}

Mount::~Mount() {
  if (!mounted_) return;
  if (!Unmount()) ::umount2(mountpoint_.c_str(), MNT_DETACH);
}

bool Mount::Unmount() {
  if (!mounted_) return true;
  CommandResult r = Epochfs({"umount", mountpoint_.string()});
  if (r.exit_code != 0) {
    ADD_FAILURE() << "epochfs umount failed: " << r.output;
    return false;
  }
  mounted_ = false;
  return true;
}

nlohmann::json Mount::Stats() const {
  return nlohmann::json::parse(ReadFile(mountpoint_ / ".epochfs" / "stats"));
}

MemoryCgroup::MemoryCgroup(uint64_t limit_bytes) {
  const fsys::path cgroups = "/sys/fs/cgroup/memory";
  if (!fsys::exists(cgroups / "cgroup.procs")) {
    why_not_ = "no cgroup-v1 memory controller";
    return;
  }
  static int serial = 0;
  group_ = cgroups / ("epochfs-test-" + std::to_string(::getpid()) + "-" + std::to_string(serial++));
  std::error_code ec;
  fsys::create_directory(group_, ec);
  if (ec) {
    why_not_ = "cannot create a memory cgroup: " + ec.message();
    group_.clear();
    return;
  }
  std::ofstream(group_ / "memory.limit_in_bytes") << limit_bytes;
  ok_ = true;
}

MemoryCgroup::~MemoryCgroup() {
  if (!group_.empty()) ::rmdir(group_.c_str());
}

std::string MemoryCgroup::Enter() const {
  return "echo $$ > " + (group_ / "cgroup.procs").string() + " && exec ";
}

uint64_t MemoryCgroup::OomKills() const {
  std::ifstream oom(group_ / "memory.oom_control");
  std::string key;
  uint64_t value = 0, kills = 0;
  while (oom >> key >> value) {
    if (key == "oom_kill") kills = value;
  }
  return kills;
}

uint64_t MemoryCgroup::PageCacheBytes() const {
  std::ifstream stat(group_ / "memory.stat");
  std::string key;
  uint64_t value = 0;
  while (stat >> key >> value) {
    if (key == "cache") return value;
  }
  return 0;
}

int WritePlan(const fsys::path& mnt, const std::string& text, size_t piece) {
  const fsys::path plan = mnt / ".epochfs" / "plan";
  const int fd = ::open(plan.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = 0;
  for (size_t off = 0; off < text.size() && err == 0; off += piece) {
    const size_t n = std::min(piece, text.size() - off);
    if (::write(fd, text.data() + off, n) != static_cast<ssize_t>(n)) err = errno ? errno : EIO;
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

bool ExitsWithin(int pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    bool running = false;
    while (std::getline(status, line)) {
      if (line.rfind("State:", 0) == 0) running = line.find('Z') == std::string::npos;
    }
    if (!running) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void AgeFile(const fsys::path& path, int seconds_ago) {
  struct timespec ts[2];
  ::clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[0].tv_sec -= seconds_ago;
  ts[1] = ts[0];
  ::utimensat(AT_FDCWD, path.c_str(), ts, AT_SYMLINK_NOFOLLOW);
}

Dataset Dataset::Make(const fsys::path& root, int count, int classes, size_t max_size,
                      uint64_t seed) {
  Dataset d;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < count; i++) {
    const std::string dir = "class_" + std::to_string(i % classes);
    fsys::create_directories(root / dir);
    size_t size = rng() % (max_size + 1);
    if (i % 50 == 7) size = (1u << 20) * 2 + 12345;  // crosses chunk boundaries
    if (i % 37 == 3) size = 0;
    const bool text = i % 5 == 0;  // some compressible label-like files
    const std::string name = dir + "/sample_" + std::to_string(i) + (text ? ".txt" : ".jpg");
    std::string content = text ? TextBytes(size, seed + i) : RandomBytes(size, seed + i);
    WriteFile(root / name, content);
    AgeFile(root / name, 3600);
    d.files.emplace_back(name, std::move(content));
  }
  // The cache admits only files whose ctime is older than the read by a clock tick or
  // more (the racily-clean rule in cache.h); let the newest file age past that.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return d;
}

std::string ReadWhole(const fsys::path& path, int extra_flags) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | extra_flags);
  if (fd < 0) return "<open failed: " + std::string(std::strerror(errno)) + ">";
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

}  // namespace epochfs::testing
