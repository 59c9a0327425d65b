#include "daemon/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace epochfs::daemon {

Result<ListenAddress> ParseListenAddress(const std::string& text, bool allow_remote) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return Status::InvalidArgument(
        fmt::format("metrics address '{}': expected HOST:PORT, e.g. 127.0.0.1:9464", text));
  }
  ListenAddress a;
  a.host = text.substr(0, colon);
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  const unsigned long p = std::strtoul(port.c_str(), &end, 10);
  if (*end != '\0' || p > 65535 || port[0] == '-' || port[0] == '+') {
    return Status::InvalidArgument(fmt::format("metrics address '{}': bad port '{}'", text, port));
  }
  a.port = static_cast<uint16_t>(p);
  if (a.host == "localhost") a.host = "127.0.0.1";
  struct in_addr addr {};
  if (::inet_pton(AF_INET, a.host.c_str(), &addr) != 1) {
    return Status::InvalidArgument(
        fmt::format("metrics address '{}': '{}' is not an IPv4 address", text, a.host));
  }
  a.loopback = (ntohl(addr.s_addr) >> 24) == 127;
  if (!a.loopback && !allow_remote) {
    return Status::InvalidArgument(fmt::format(
        "metrics address '{}' is not loopback; add --metrics-allow-remote to serve it there",
        text));
  }
  return a;
}

Result<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(
    const Options& options, std::function<std::string()> render) {
  std::unique_ptr<MetricsExporter> e(new MetricsExporter());
  e->options_ = options;
  e->render_ = std::move(render);
  if (!options.listen.empty()) {
    auto addr = ParseListenAddress(options.listen, options.allow_remote);
    if (!addr.ok()) return addr.status();
    e->listen_fd_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!e->listen_fd_) return Status::FromErrno(errno, "metrics socket");
    const int one = 1;
    ::setsockopt(e->listen_fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa {};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(addr->port);
    ::inet_pton(AF_INET, addr->host.c_str(), &sa.sin_addr);
    if (::bind(e->listen_fd_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) < 0) {
      return Status::FromErrno(errno, fmt::format("metrics endpoint {}", options.listen));
    }
    if (::listen(e->listen_fd_.get(), 16) < 0) {
      return Status::FromErrno(errno, fmt::format("metrics endpoint {}", options.listen));
    }
    socklen_t len = sizeof(sa);
    ::getsockname(e->listen_fd_.get(), reinterpret_cast<sockaddr*>(&sa), &len);
    e->port_ = ntohs(sa.sin_port);
    e->stop_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!e->stop_fd_) return Status::FromErrno(errno, "metrics eventfd");
    e->server_ = std::thread([p = e.get()] { p->Serve(); });
    spdlog::info("metrics at http://{}:{}/metrics", addr->host, e->port_);
  }
  if (!options.textfile.empty()) {
    // Written once now, so a bad path shows at start-up and not 10 s later.
    Status first = e->WriteTextfile();
    if (!first.ok()) return first;
    e->textfile_writer_ = std::thread([p = e.get()] { p->WriteTextfileLoop(); });
  }
  return e;
}

MetricsExporter::~MetricsExporter() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (stop_fd_) {
    const uint64_t one = 1;
    ssize_t ignored = ::write(stop_fd_.get(), &one, sizeof(one));
    (void)ignored;  // the eventfd cannot be full after one write
  }
  if (server_.joinable()) server_.join();
  if (textfile_writer_.joinable()) textfile_writer_.join();
  // Counters of a mount that is gone must not stay exported as if it were live.
  if (!options_.textfile.empty()) ::unlink(options_.textfile.c_str());
}

void MetricsExporter::Serve() {
  while (true) {
    struct pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("metrics endpoint stopped: poll: {}", strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    UniqueFd client(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client) continue;  // EAGAIN, ECONNABORTED: the next poll tells
    ServeOne(client.get());
  }
}

void MetricsExporter::ServeOne(int fd) {
  struct timeval timeout {
    1, 0
  };
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  std::string request;
  char buf[1024];
  while (request.find("\r\n\r\n") == std::string::npos &&
         request.find("\n\n") == std::string::npos && request.size() < 8192) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;  // closed, timed out or failed: answer what we have
    request.append(buf, static_cast<size_t>(n));
  }
  const std::string line = request.substr(0, request.find_first_of("\r\n"));
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  if (line.rfind("GET /metrics ", 0) == 0 || line == "GET /metrics") {
    // An exception must not end the exporter's thread (and with it the daemon).
    try {
      body = render_();
    } catch (const std::exception& e) {
      status = "500 Internal Server Error";
      type = "text/plain";
      body = std::string("cannot render metrics: ") + e.what() + "\n";
    }
  } else if (line.rfind("GET ", 0) == 0) {
    status = "404 Not Found";
    type = "text/plain";
    body = "epochfs serves /metrics only\n";
  } else {
    status = "405 Method Not Allowed";
    type = "text/plain";
    body = "GET /metrics\n";
  }
  const std::string response = fmt::format(
      "HTTP/1.0 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      status, type, body.size(), body);
  size_t sent = 0;
  while (sent < response.size()) {
    const ssize_t n = ::send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the client went away or stalled past the timeout
    sent += static_cast<size_t>(n);
  }
}

Status MetricsExporter::WriteTextfile() {
  const std::filesystem::path tmp = options_.textfile.string() + ".tmp";
  std::string text;
  try {
    text = render_();
  } catch (const std::exception& e) {
    return Status::IoError(fmt::format("metrics textfile: cannot render: {}", e.what()));
  }
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return Status::FromErrno(errno, fmt::format("metrics textfile {}", tmp.string()));
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, fmt::format("metrics textfile {}", tmp.string()));
    }
    written += static_cast<size_t>(n);
  }
  fd.reset();
  if (::rename(tmp.c_str(), options_.textfile.c_str()) < 0) {
    return Status::FromErrno(errno, fmt::format("metrics textfile {}", options_.textfile.string()));
  }
  return Status::Ok();
}

void MetricsExporter::WriteTextfileLoop() {
  bool warned = false;
  MutexLock lock(mutex_);
  while (true) {
    const auto interval = std::chrono::duration<double>(options_.textfile_interval_s);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::ceil<std::chrono::steady_clock::duration>(interval);
    while (!stopping_ && lock.WaitUntil(stop_cv_, deadline) == std::cv_status::no_timeout) {
    }
    if (stopping_) return;
    lock.Unlock();
    Status st = WriteTextfile();
    if (!st.ok() && !warned) {
      spdlog::warn("{} (logged once)", st.ToString());  // one line, not one per 10 s
      warned = true;
    }
    lock.Lock();
  }
}

}  // namespace epochfs::daemon
