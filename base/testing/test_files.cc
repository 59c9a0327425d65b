#include "base/testing/test_files.h"

#include <stdlib.h>
#include <sys/mount.h>

#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace epochfs::testing {

TempDir::TempDir() {
  std::string tmpl = "/tmp/epochfs-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(path_, ignored)) {
    if (IsMounted(entry.path())) ::umount2(entry.path().c_str(), MNT_DETACH);
  }
  std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::Write(const std::string& rel, const std::string& bytes) const {
  const std::filesystem::path p = path_ / rel;
  std::filesystem::create_directories(p.parent_path());
  WriteFile(p, bytes);
  return p.string();
}

std::string TempDir::Mkdir(const std::string& rel) const {
  const std::filesystem::path p = path_ / rel;
  std::filesystem::create_directories(p);
  return p.string();
}

void WriteFile(const std::filesystem::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    for (size_t j = 0; j < 8 && i + j < n; ++j) out[i + j] = static_cast<char>(v >> (8 * j));
  }
  return out;
}

std::string TextBytes(size_t n, uint64_t seed) {
  static const char* kWords[] = {"epoch ", "sample ",   "tensor ", "shuffle ",
                                 "batch ", "gradient ", "loader ", "cache "};
  std::mt19937_64 rng(seed);
  std::string out;
  out.reserve(n + 16);
  while (out.size() < n) out += kWords[rng() % 8];
  out.resize(n);
  return out;
}

bool IsMounted(const std::filesystem::path& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  const std::string needle = " " + std::filesystem::weakly_canonical(path).string() + " ";
  while (std::getline(in, line)) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace epochfs::testing
