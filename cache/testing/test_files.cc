#include "cache/testing/test_files.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace epochfs::cache::testing {

OpenSource OpenSourceFile(const std::filesystem::path& path) {
  OpenSource s;
  s.fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!s.fd) throw std::runtime_error("cannot open " + path.string());
  struct stat st;
  if (::fstat(s.fd.get(), &st) != 0) throw std::runtime_error("cannot stat " + path.string());
  s.file = SourceFile{.fd = s.fd.get(), .id = SourceIdentity::FromStat(st), .open = nullptr};
  return s;
}

void WaitUntilFilesSettle() { std::this_thread::sleep_for(std::chrono::milliseconds(60)); }

size_t ResidentPages(const std::filesystem::path& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || st.st_size == 0) return 0;
  const size_t len = static_cast<size_t>(st.st_size);
  void* map = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (map == MAP_FAILED) return 0;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> pages((len + page - 1) / page);
  size_t resident = 0;
  if (::mincore(map, len, pages.data()) == 0) {
    for (unsigned char p : pages) resident += p & 1;
  }
  ::munmap(map, len);
  return resident;
}

}  // namespace epochfs::cache::testing
