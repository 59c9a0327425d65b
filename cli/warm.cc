#include "cli/warm.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "base/thread_annotations.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace epochfs::cli {
namespace {

namespace fsys = std::filesystem;

struct Totals {
  uint64_t source_bytes = 0, source_reads = 0, hits = 0, hit_bytes = 0;
  // Chunks read but not stored in the SSD tier, and why.
  uint64_t ssd_writes_dropped = 0, not_admitted = 0;
  bool ssd_degraded = false;
  std::string ssd_degraded_reason;
  uint64_t ssd_bytes = 0, ssd_budget_bytes = 0;
};

// At most this many passes over the files: a pass after the first reads again what the
// cache disk could not keep up with (the files already stored are cheap hits).
constexpr int kMaxPasses = 3;
constexpr size_t kReadBytes = 1 << 20;

bool ReadTotals(const fsys::path& mountpoint, Totals* out) {
  std::ifstream in(mountpoint / ".epochfs" / "stats");
  if (!in) return false;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  out->source_bytes = j.value("source_bytes", uint64_t{0});
  out->source_reads = j.value("source_reads", uint64_t{0});
  out->hits = j.value("ram_hits", uint64_t{0}) + j.value("ssd_hits", uint64_t{0});
  out->hit_bytes = j.value("ram_hit_bytes", uint64_t{0}) + j.value("ssd_hit_bytes", uint64_t{0});
  out->ssd_writes_dropped = j.value("ssd_writes_dropped", uint64_t{0});
  out->not_admitted = j.value("not_admitted", uint64_t{0});
  out->ssd_degraded = j.value("ssd_degraded", false);
  out->ssd_degraded_reason = j.value("ssd_degraded_reason", std::string());
  out->ssd_bytes = j.value("ssd_bytes", uint64_t{0});
  out->ssd_budget_bytes = j.value("ssd_budget_bytes", uint64_t{0});
  return true;
}

std::string Bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.1f} {}", b, units[u]);
}

std::string Duration(double s) {
  if (!(s >= 0) || s > 1e7) return "--:--";
  const auto t = static_cast<uint64_t>(s);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

}  // namespace

int RunWarm(const WarmOptions& options) {
  std::error_code ec;
  const fsys::path mnt = fsys::canonical(options.mountpoint, ec);
  Totals before;
  if (ec || !ReadTotals(mnt, &before)) {
    fmt::print(stderr, "epochfs: error: {} is not an epochfs mount\n", options.mountpoint.string());
    return 2;
  }
  // The files, walked through the mount (readdir never lists .epochfs).
  std::vector<std::pair<fsys::path, uint64_t>> files;
  std::vector<fsys::path> roots;
  if (options.paths.empty()) roots.push_back(mnt);
  for (const auto& p : options.paths) {
    fsys::path full = fsys::path(p).is_absolute() ? fsys::path(p) : mnt / p;
    fsys::path canon = fsys::weakly_canonical(full, ec);
    auto rel = canon.lexically_relative(mnt);
    if (ec || rel.empty() || *rel.begin() == "..") {
      fmt::print(stderr, "epochfs: error: {} is not inside {}\n", p, mnt.string());
      return 2;
    }
    roots.push_back(canon);
  }
  for (const auto& root : roots) {
    if (fsys::is_regular_file(fsys::symlink_status(root, ec))) {
      files.emplace_back(root, fsys::file_size(root, ec));
      continue;
    }
    for (auto it = fsys::recursive_directory_iterator(
             root, fsys::directory_options::skip_permission_denied, ec);
         !ec && it != fsys::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec)) files.emplace_back(it->path(), it->file_size(ec));
    }
    if (ec) {
      fmt::print(stderr, "epochfs: error: walking {}: {}\n", root.string(), ec.message());
      return 2;
    }
  }
  std::sort(files.begin(), files.end());  // directory order: what the SSD tier will hold
  uint64_t total_bytes = 0;
  for (const auto& f : files) total_bytes += f.second;

  const bool tty = ::isatty(STDERR_FILENO) == 1;
  // One pass: every file read through the mount by `threads` readers, with progress.
  // Returns how many files could not be read.
  auto read_pass = [&](int pass) -> size_t {
    std::atomic<size_t> next{0}, done_files{0}, failed{0};
    std::atomic<uint64_t> done_bytes{0};
    Mutex err_mu;
    auto worker = [&] {
      // Aligned for O_DIRECT.
      std::unique_ptr<char, decltype(&std::free)> buf(
          static_cast<char*>(std::aligned_alloc(4096, kReadBytes)), &std::free);
      for (size_t i = next++; i < files.size(); i = next++) {
        const auto& path = files[i].first;
        // Direct: every read reaches the daemon, which is what fills its tiers; a file the
        // page cache holds would otherwise be read from there, and the daemon never see it.
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        bool ok = fd >= 0;
        while (ok) {
          ssize_t n = ::read(fd, buf.get(), kReadBytes);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) {
            ok = n == 0;
            break;
          }
          done_bytes += static_cast<uint64_t>(n);
        }
        if (!ok) {
          MutexLock lock(err_mu);
          fmt::print(stderr, "epochfs: warm: {}: {}\n", path.string(), std::strerror(errno));
          ++failed;
        }
        if (fd >= 0) ::close(fd);
        if (ok && options.ram) {  // into the page cache too: a buffered read of it
          const int cached = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
          while (cached >= 0 && ::read(cached, buf.get(), kReadBytes) > 0) {
          }
          if (cached >= 0) ::close(cached);
        }
        ++done_files;
      }
    };
    const auto pass_start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < std::max(1u, options.threads); ++t) threads.emplace_back(worker);

    const std::string label = pass == 1 ? "" : fmt::format("pass {}: ", pass);
    auto last_line = pass_start;
    auto report = [&](bool final) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - pass_start).count();
      const double rate = s > 0 ? done_bytes / s : 0;
      const double eta =
          rate > 0 ? (total_bytes - std::min<uint64_t>(done_bytes, total_bytes)) / rate : -1;
      const size_t n = done_files;
      if (tty) {
        const int width = 30;
        const int fill = files.empty() ? width : static_cast<int>(width * n / files.size());
        fmt::print(stderr, "\r{}[{}{}] {}/{} files  {}/{}  {}/s  ETA {}   ", label,
                   std::string(fill, '#'), std::string(width - fill, ' '), n, files.size(),
                   Bytes(done_bytes), Bytes(total_bytes), Bytes(rate), Duration(eta));
        if (final) fmt::print(stderr, "\n");
      } else {
        fmt::print(stderr, "warm: {}{}/{} files, {}/{}, {}/s, ETA {}\n", label, n, files.size(),
                   Bytes(done_bytes), Bytes(total_bytes), Bytes(rate), Duration(eta));
      }
    };
    while (done_files < files.size()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const auto now = std::chrono::steady_clock::now();
      if (tty ||
          std::chrono::duration<double>(now - last_line).count() >= options.report_interval_s) {
        report(false);
        last_line = now;
      }
    }
    for (auto& t : threads) t.join();
    report(true);
    return failed.load();
  };

  const auto start = std::chrono::steady_clock::now();
  size_t failed = read_pass(1);
  int passes = 1;
  Totals after;
  ReadTotals(mnt, &after);
  // A queue the cache disk could not drain in time drops chunks (the daemon never makes
  // a reader wait long for its cache disk). Warm exists to fill the SSD tier, so it
  // reads again: what was stored is a cheap hit now, what was dropped is fetched and
  // queued again. Not when the tier is full or degraded: reading again would not help.
  uint64_t dropped = after.ssd_writes_dropped - before.ssd_writes_dropped;  // last pass
  for (int pass = 2; pass <= kMaxPasses && dropped > 0 && failed == 0; ++pass) {
    const bool tier_full = after.ssd_budget_bytes > 0 &&
                           after.ssd_bytes + after.ssd_budget_bytes / 20 >= after.ssd_budget_bytes;
    if (after.ssd_degraded || tier_full) break;
    fmt::print(stderr,
               "epochfs: warm: the cache disk fell behind ({} chunks not stored); reading "
               "again (pass {} of at most {})\n",
               dropped, pass, kMaxPasses);
    std::this_thread::sleep_for(std::chrono::seconds(1));  // the writer catches up
    const Totals before_pass = after;
    failed = read_pass(pass);
    passes = pass;
    ReadTotals(mnt, &after);
    dropped = after.ssd_writes_dropped - before_pass.ssd_writes_dropped;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Counted by the daemon: also includes other readers of the mount meanwhile.
  fmt::print("warmed {} files ({}) in {:.1f} s{}: the daemon read {} chunks from the source "
             "({}) and found {} in its cache ({}){}\n",
             files.size() - failed, Bytes(total_bytes), s,
             passes > 1 ? fmt::format(" ({} passes)", passes) : "",
             after.source_reads - before.source_reads,
             Bytes(after.source_bytes - before.source_bytes), after.hits - before.hits,
             Bytes(after.hit_bytes - before.hit_bytes),
             failed ? fmt::format(", {} failed", failed) : "");
  // Warm exists to fill the SSD tier: say plainly what did not get there.
  const uint64_t not_admitted = after.not_admitted - before.not_admitted;
  bool incomplete = false;
  if (dropped > 0) {
    incomplete = true;
    fmt::print(stderr,
               "epochfs: warm: {} chunks were read but not stored in the SSD tier ({}); "
               "run warm again once that is fixed\n",
               dropped,
               after.ssd_degraded ? after.ssd_degraded_reason
                                  : "the tier is full (see --disk) or the cache disk fell behind");
  }
  if (not_admitted > 0) {
    fmt::print(stderr,
               "epochfs: warm: {} chunks were not cached because their files changed in the "
               "last moments (they are cached on a later read)\n",
               not_admitted);
  }
  return failed || incomplete ? 1 : 0;
}

}  // namespace epochfs::cli
