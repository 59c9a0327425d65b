#include "loader/pread_limit.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

namespace epochfs::loader {

PreadRate MeasureParallelPread(const std::vector<std::string>& files, unsigned threads,
                               double seconds, uint64_t dest_bytes) {
  PreadRate rate;
  if (files.empty() || threads == 0) return rate;
  size_t largest = 0;
  for (const auto& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) == 0) largest = std::max(largest, static_cast<size_t>(st.st_size));
  }
  largest = std::max<size_t>(largest, 1);
  // Room for every thread's file at once, and at least `dest_bytes`.
  const size_t places = std::max<size_t>(threads, dest_bytes / largest);
  // Anonymous memory, as the loader's host ring (backend.cc), faulted in before the clock.
  const size_t dest_size = places * largest;
  void* mapped = ::mmap(nullptr, dest_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
  if (mapped == MAP_FAILED) return rate;
  char* const dest = static_cast<char*>(mapped);
  std::memset(dest, 0, dest_size);
  std::atomic<uint64_t> cursor{0}, done_files{0}, done_bytes{0};
  std::atomic<bool> stop{false};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      uint64_t my_files = 0, my_bytes = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const uint64_t i = cursor.fetch_add(1, std::memory_order_relaxed);
        const int fd = ::open(files[i % files.size()].c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        char* const to = dest + (i % places) * largest;
        size_t got = 0;
        while (got < largest) {
          const ssize_t n = ::pread(fd, to + got, largest - got, static_cast<off_t>(got));
          if (n <= 0) break;
          got += static_cast<size_t>(n);
        }
        ::close(fd);
        my_files++;
        my_bytes += got;
        if (i + 1 >= files.size() &&
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >=
                seconds) {
          stop.store(true, std::memory_order_relaxed);
        }
      }
      done_files += my_files;
      done_bytes += my_bytes;
    });
  }
  for (auto& w : workers) w.join();
  ::munmap(mapped, dest_size);
  rate.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rate.files = done_files.load();
  rate.bytes = done_bytes.load();
  return rate;
}

}  // namespace epochfs::loader
