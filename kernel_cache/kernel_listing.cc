#include "kernel_cache/kernel_listing.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/thread_name.h"
#include "base/unique_fd.h"
#include "spdlog/spdlog.h"

namespace epochfs::kernel_cache {

KernelListing::KernelListing(const MountView& mount, std::vector<std::string> folders,
                             uint64_t max_entries)
    : mount_(mount),
      folders_(std::move(folders)),
      max_entries_(max_entries) {
  const size_t threads = std::min(kThreads, folders_.size());
  running_.store(threads);
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

KernelListing::~KernelListing() {
  Stop();
  for (std::thread& thread : threads_) thread.join();
}

std::vector<std::string> KernelListing::FoldersOf(const std::vector<std::string>& paths) {
  std::vector<std::string> folders;
  folders.reserve(paths.size() / 64 + 1);
  for (const std::string& path : paths) folders.push_back(FolderOf(path));
  std::sort(folders.begin(), folders.end());
  folders.erase(std::unique(folders.begin(), folders.end()), folders.end());
  return folders;
}

std::string KernelListing::FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::optional<KernelListing::Listed> KernelListing::ListFolder(const MountView& mount,
                                                              const std::string& folder,
                                                              uint64_t max_entries,
                                                              const std::atomic<bool>* stop) {
  Result<UniqueFd> fd = mount.Open(folder, O_RDONLY | O_DIRECTORY);
  if (!fd.ok()) {
    // Gone since it was recorded or read, or the mount is going: neither is an error.
    spdlog::debug("listing: {}", fd.status().ToString());
    return std::nullopt;
  }
  // getdents64 straight: readdir() would add nothing but a buffer of its own.
  alignas(8) char buf[64 * 1024];
  Listed listed;
  while (listed.entries <= max_entries &&
         (stop == nullptr || !stop->load(std::memory_order_relaxed))) {
    // The users unmounted meanwhile: what is left is nobody's (mount_view.h).
    if (listed.entries > 0 && !mount.StillMounted()) break;
    const long n = ::syscall(SYS_getdents64, fd->get(), buf, sizeof(buf));
    if (n <= 0) break;  // the end, or an error (the connection went)
    for (long at = 0; at < n; ++listed.entries) {
      const auto* entry = reinterpret_cast<const struct dirent64*>(buf + at);
      if (entry->d_type == DT_REG) ++listed.files;
      at += entry->d_reclen;
    }
  }
  return listed;
}

void KernelListing::Run() {
  NameThisThread("kernel-listing");
  while (true) {
    const size_t index = next_.fetch_add(1, std::memory_order_relaxed);
    if (index >= folders_.size() || stop_.load(std::memory_order_relaxed) ||
        entries_.load(std::memory_order_relaxed) >= max_entries_) {
      break;
    }
    const std::optional<Listed> listed = ListFolder(mount_, folders_[index], UINT64_MAX, &stop_);
    if (!listed) continue;
    entries_.fetch_add(listed->entries, std::memory_order_relaxed);
    listed_.fetch_add(1, std::memory_order_relaxed);
  }
  if (running_.fetch_sub(1) == 1) {
    spdlog::info("listed {} recorded folders ({} entries) so that pushes can start before the "
                 "first open",
                 listed_.load(), entries_.load());
  }
}

}  // namespace epochfs::kernel_cache
