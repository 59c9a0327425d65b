// Exporting metrics (daemon/metrics.h) while a mount runs: an HTTP endpoint for Prometheus
// (`--metrics-listen HOST:PORT`) and a node-exporter textfile (`--metrics-textfile`).
//
// The endpoint is deliberately tiny: one thread polling up to 256 connections at once,
// HTTP/1.0, `GET /metrics` only (404 otherwise), requests bounded to 8 KiB and each
// connection to 2 s in all, so idle or hostile clients cost a slot for 2 s, never a
// scrape (served one at a time, idle connections made scrapes time out:
// docs/benchmarks.md, "Figures behind design choices") or a FUSE worker.
// It binds loopback unless the operator allows another host: the counters are not
// secret, but the endpoint should not be reachable from the network by accident.
// The textfile is rewritten every 10 s as FILE.tmp + rename, so node-exporter never
// reads half a file, and removed when the exporter stops, so a mount that is gone does
// not stay exported with frozen counters.
//
// Thread-safety: Start and the destructor from one thread; `render` is called from the
// exporter's threads and must be thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"

namespace epochfs::daemon {

struct ListenAddress {
  std::string host;  // an IPv4 address (or "localhost")
  uint16_t port = 0;
  bool loopback = false;
};

// "127.0.0.1:9100", "localhost:9100", "0.0.0.0:9100". Refuses non-loopback hosts
// unless `allow_remote`.
Result<ListenAddress> ParseListenAddress(const std::string& text, bool allow_remote);

class MetricsExporter {
 public:
  struct Options {
    std::string listen;  // empty: no endpoint
    bool allow_remote = false;
    std::filesystem::path textfile;  // empty: no textfile
    double textfile_interval_s = 10.0;
  };

  // Binds the endpoint (errors are returned, nothing is left running) and starts the
  // threads. `render` returns the Prometheus text.
  static Result<std::unique_ptr<MetricsExporter>> Start(const Options& options,
                                                        std::function<std::string()> render);
  ~MetricsExporter();
  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;

  // The port actually bound (useful with port 0); 0 without an endpoint.
  uint16_t port() const { return port_; }

 private:
  MetricsExporter() = default;
  struct Client;
  void Serve();
  void Advance(Client& client);
  std::string Respond(const std::string& request) const;
  void WriteTextfileLoop();
  Status WriteTextfile();

  Options options_;
  std::function<std::string()> render_;
  UniqueFd listen_fd_;
  UniqueFd stop_fd_;  // eventfd: wakes the server's poll on shutdown
  uint16_t port_ = 0;
  Mutex mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::thread server_;
  std::thread textfile_writer_;
};

}  // namespace epochfs::daemon
