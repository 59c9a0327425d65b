#include "fs/metadata_warmup.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <utility>

#include "base/thread_name.h"
#include "fs/open_beneath.h"

namespace epochfs::fs {

MetadataWarmup::MetadataWarmup(int root_fd, std::vector<std::string> paths, InodeTable& table,
                               const Options& options)
    : root_fd_(root_fd), paths_(std::move(paths)), table_(table), options_(options) {
  thread_ = std::thread([this] { Run(); });
}

MetadataWarmup::~MetadataWarmup() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MetadataWarmup::WaitWalked() {
  MutexLock lock(mu_);
  while (!walked_) lock.Wait(cv_);
}

void MetadataWarmup::Walk() {
  NameThisThread("meta-warmup");
  for (;;) {
    {
      MutexLock lock(mu_);
      if (stop_) return;
    }
    const size_t i = next_.fetch_add(1);
    if (i >= paths_.size() || budget_full_.load()) return;
    Result<UniqueFd> fd = OpenBeneath(root_fd_, paths_[i], O_PATH);
    struct ::stat st {};
    if (!fd.ok() || ::fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      failed_.fetch_add(1, std::memory_order_relaxed);  // gone or replaced since the record
      continue;
    }
    if (!table_.Pin(st, std::move(*fd))) {
      budget_full_.store(true);
      return;
    }
    opened_.fetch_add(1, std::memory_order_relaxed);
  }
}

void MetadataWarmup::Run() {
  NameThisThread("meta-warmup");
  const auto started = std::chrono::steady_clock::now();
  table_.SetPinForgotten(true);
  {
    std::vector<std::thread> workers;
    for (size_t t = 0; t < std::max<size_t>(1, options_.threads); ++t) {
      workers.emplace_back([this] { Walk(); });
    }
    for (std::thread& w : workers) w.join();
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::info("metadata warm-up: {} of {} recorded files in memory in {:.1f} s{}", opened(),
               paths_.size(), took,
               budget_full_.load() ? " (the rest would exceed the fd budget)" : "");
  walking_.store(false);
  {
    MutexLock lock(mu_);
    walked_ = true;
  }
  cv_.notify_all();

  // Held for max_hold even once every pin was taken by a LOOKUP: a node the kernel
  // forgets meanwhile leaves a pin again (InodeTable::SetPinForgotten).
  const auto give_up = started + options_.max_hold;
  MutexLock lock(mu_);
  while (!stop_ && std::chrono::steady_clock::now() < give_up) {
    lock.WaitFor(cv_, options_.check_every);
    if (stop_) break;
    lock.Unlock();
    table_.ReleasePins(/*all=*/false);
    lock.Lock();
  }
  lock.Unlock();
  table_.SetPinForgotten(false);
  table_.ReleasePins(/*all=*/true);
}

}  // namespace epochfs::fs
