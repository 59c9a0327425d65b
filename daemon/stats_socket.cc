#include "daemon/stats_socket.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "base/owned_dirs.h"
#include "base/thread_name.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace epochfs::daemon {
namespace fsys = std::filesystem;
namespace {

Result<sockaddr_un> SocketAddress(const fsys::path& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.string().size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument(fmt::format("socket path {} is too long", path.string()));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.string().size() + 1);
  return addr;
}

// Writes all of `text`, giving up when a wait for room exceeds `timeout_ms` (a client
// that stopped reading).
void SendAll(int fd, const std::string& text, int timeout_ms) {
  size_t sent = 0;
  while (sent < text.size()) {
    struct pollfd p = {fd, POLLOUT, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return;
    const ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

}  // namespace

fsys::path StatsSocketPath(const std::string& device) {
  std::string name = device;
  for (char& c : name) {
    if (c == ':') c = '-';
  }
  return fsys::path("/run/epochfs") / (name + ".sock");
}

Result<std::unique_ptr<StatsSocket>> StatsSocket::Start(const fsys::path& path, bool everyone,
                                                        std::function<std::string()> render) {
  auto addr = SocketAddress(path);
  if (!addr.ok()) return addr.status();
  // Only its owner may add, remove or replace names in the folder.
  EPOCHFS_RETURN_IF_ERROR(MakeOwnedDir(path.parent_path(), 0755));
  std::unique_ptr<StatsSocket> s(new StatsSocket());
  s->path_ = path;
  s->render_ = std::move(render);
  s->listen_fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s->listen_fd_) return Status::FromErrno(errno, "stats socket");
  // bind() gives the new socket file the mode of the socket's own inode, less the umask:
  // set on the fd first, there is no moment when the file has another mode, and no path
  // is followed to set it.
  const mode_t mode = everyone ? 0666 : 0600;
  if (::fchmod(s->listen_fd_.get(), mode) != 0) {
    return Status::FromErrno(errno, "stats socket mode");
  }
  // Device numbers are reused: what is there is a dead daemon's (a live one's device
  // would not be ours).
  ::unlink(path.c_str());
  const mode_t umask_before = ::umask(0);
  const int bound = ::bind(s->listen_fd_.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr));
  ::umask(umask_before);
  if (bound < 0) return Status::FromErrno(errno, fmt::format("stats socket {}", path.string()));
  if (::listen(s->listen_fd_.get(), 16) < 0) {
    return Status::FromErrno(errno, fmt::format("stats socket {}", path.string()));
  }
  s->stop_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s->stop_fd_) return Status::FromErrno(errno, "stats socket eventfd");
  s->thread_ = std::thread([p = s.get()] { p->Serve(); });
  return s;
}

StatsSocket::~StatsSocket() {
  const uint64_t one = 1;
  ssize_t ignored = ::write(stop_fd_.get(), &one, sizeof(one));
  (void)ignored;  // the eventfd cannot be full after one write
  if (thread_.joinable()) thread_.join();
  ::unlink(path_.c_str());
}

void StatsSocket::Serve() {
  NameThisThread("stats-socket");
  while (true) {
    struct pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("stats socket stopped: poll: {}", strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    UniqueFd client(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client) continue;  // EAGAIN, ECONNABORTED: the next poll tells
    std::string text;
    try {
      text = render_();
    } catch (const std::exception& e) {
      text = fmt::format("{{\"error\": \"rendering failed: {}\"}}\n", e.what());
    }
    // The JSON is a few KiB, within the socket's buffer: a client that never reads
    // costs at most the timeout.
    SendAll(client.get(), text, 1000);
  }
}

Result<StatsReply> QueryStatsSocket(const fsys::path& path, uid_t daemon_uid, double timeout_s) {
  auto addr = SocketAddress(path);
  if (!addr.ok()) return addr.status();
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return Status::FromErrno(errno, "socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) < 0) {
    if (errno == ENOENT || errno == ECONNREFUSED) {
      return Status::NotFound(fmt::format("no daemon listens on {}", path.string()));
    }
    return Status::FromErrno(errno, fmt::format("connect {}", path.string()));
  }
  StatsReply reply;
  struct ucred cred {};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Status::FromErrno(errno, fmt::format("peer of {}", path.string()));
  }
  if (cred.uid != daemon_uid) {
    return Status::FromErrno(
        EPERM, fmt::format("{} is served by uid {} (pid {}), not by the mount's daemon (uid {}): "
                           "refused",
                           path.string(), cred.uid, cred.pid, daemon_uid));
  }
  reply.pid = cred.pid;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[16384];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    struct pollfd p = {fd.get(), POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0) {
      return Status::IoError(fmt::format("{} did not answer within {} s", path.string(), timeout_s));
    }
    const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, fmt::format("read {}", path.string()));
    if (n == 0) break;
    reply.text.append(buf, static_cast<size_t>(n));
  }
  return reply;
}

}  // namespace epochfs::daemon
