#include "loader/test_files.h"

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace epochfs::loader::testing {

TempDir::TempDir() {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "epochfs-loader-test-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Write(const std::string& rel, const std::string& bytes) const {
  std::filesystem::path p = std::filesystem::path(path_) / rel;
  std::filesystem::create_directories(p.parent_path());
  WriteFile(p.string(), bytes);
  return p.string();
}

std::string TempDir::Mkdir(const std::string& rel) const {
  std::filesystem::path p = std::filesystem::path(path_) / rel;
  std::filesystem::create_directories(p);
  return p.string();
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::string out(n, '\0');
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<char>(x);
  }
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

namespace {
int CountEntries(const char* dir) {
  DIR* d = ::opendir(dir);
  if (d == nullptr) return -1;
  int n = 0;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n;
}
}  // namespace

int CountOpenFds() { return CountEntries("/proc/self/fd") - 1; }  // minus opendir's own
int CountThreads() { return CountEntries("/proc/self/task"); }

int WaitForThreadsAtMost(int n, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int count = CountThreads();
  while (count > n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    count = CountThreads();
  }
  return count;
}

}  // namespace epochfs::loader::testing
