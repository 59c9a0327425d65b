#include "daemon/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "base/thread_name.h"
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
    if (::listen(e->listen_fd_.get(), 128) < 0) {
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

// One client of the endpoint: what it sent so far, and what is left to send it.
struct MetricsExporter::Client {
  UniqueFd fd;
  std::chrono::steady_clock::time_point deadline;
  std::string request;
  std::string response;
  size_t sent = 0;
};

namespace {

constexpr size_t kMaxClients = 256;
constexpr size_t kMaxRequestBytes = 8192;
constexpr auto kClientTime = std::chrono::seconds(2);

bool RequestComplete(const std::string& r) {
  return r.find("\r\n\r\n") != std::string::npos || r.find("\n\n") != std::string::npos ||
         r.size() >= kMaxRequestBytes;
}

}  // namespace

void MetricsExporter::Serve() {
  NameThisThread("metrics-http");
  std::vector<Client> clients;
  while (true) {
    std::vector<struct pollfd> fds = {{listen_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    // With every slot taken, the listener waits: the backlog holds new clients until an
    // idle one times out (each has kClientTime in all).
    if (clients.size() >= kMaxClients) fds[0].events = 0;
    auto now = std::chrono::steady_clock::now();
    auto next_deadline = now + std::chrono::hours(1);
    for (const Client& c : clients) {
      fds.push_back({c.fd.get(), static_cast<short>(c.response.empty() ? POLLIN : POLLOUT), 0});
      next_deadline = std::min(next_deadline, c.deadline);
    }
    const int timeout_ms = static_cast<int>(
        std::chrono::ceil<std::chrono::milliseconds>(next_deadline - now).count());
    if (::poll(fds.data(), fds.size(), std::max(timeout_ms, 0)) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("metrics endpoint stopped: poll: {}", strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < clients.size(); i++) {
      if (fds[i + 2].revents != 0) Advance(clients[i]);
    }
    // A client still silent at its deadline gets one try at an answer to what it sent
    // (as a blocking server's read timeout would give it), then goes.
    for (Client& c : clients) {
      if (now > c.deadline && c.fd && c.response.empty()) {
        c.response = Respond(c.request);
        Advance(c);
      }
    }
    // Done, failed, or out of time: a slow or idle client costs one slot for
    // kClientTime, never the others' scrapes.
    std::erase_if(clients, [&](const Client& c) {
      return !c.fd || (!c.response.empty() && c.sent == c.response.size()) || now > c.deadline;
    });
    if (fds[0].revents & POLLIN) {
      while (clients.size() < kMaxClients) {
        UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!fd) break;  // EAGAIN: no more waiting; ECONNABORTED: the next poll tells
        clients.push_back(Client{std::move(fd), now + kClientTime, {}, {}, 0});
      }
    }
  }
}

// Reads what the client sent, or sends what is left; answers once the request is whole.
// A closed or failed socket is reset, and the client dropped by the caller.
void MetricsExporter::Advance(Client& c) {
  if (c.response.empty()) {
    char buf[1024];
    const ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n > 0) c.request.append(buf, static_cast<size_t>(n));
    // A client that closed its side before the blank line gets an answer to what it sent.
    if (n > 0 && !RequestComplete(c.request)) return;
    c.response = Respond(c.request);
  }
  while (c.sent < c.response.size()) {
    const ssize_t n =
        ::send(c.fd.get(), c.response.data() + c.sent, c.response.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EAGAIN) return;  // the next POLLOUT goes on
    if (n <= 0) {
      c.fd.reset();
      return;
    }
    c.sent += static_cast<size_t>(n);
  }
}

std::string MetricsExporter::Respond(const std::string& request) const {
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
  return fmt::format(
      "HTTP/1.0 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      status, type, body.size(), body);
}

Status MetricsExporter::WriteTextfile() {
  const std::filesystem::path tmp = options_.textfile.string() + ".tmp";
  std::string text;
  try {
    text = render_();
  } catch (const std::exception& e) {
    return Status::IoError(fmt::format("metrics textfile: cannot render: {}", e.what()));
  }
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
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
  NameThisThread("metrics-file");
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
