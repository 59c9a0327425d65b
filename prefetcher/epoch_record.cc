#include "prefetcher/epoch_record.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "base/unique_fd.h"

namespace epochfs::prefetch {

Status SaveEpochRecord(const std::filesystem::path& path, const EpochRecord& record) {
  std::string text = "epochfs-epochs 1\n";
  std::vector<int64_t> remap(record.files.size(), -1);
  std::string lines;
  uint32_t kept = 0;
  for (size_t i = 0; i < record.files.size(); ++i) {
    const auto& [key, name] = record.files[i];
    if (name.empty() || name.find('\n') != std::string::npos) continue;
    remap[i] = kept++;
    lines += fmt::format("{} {} {}\n", key.dev, key.ino, name);
  }
  text += fmt::format("files {}\n", kept) + lines;
  std::string order;
  uint32_t count = 0;
  for (uint32_t i : record.order) {
    if (i >= remap.size() || remap[i] < 0) continue;
    order += fmt::format("{}\n", remap[i]);
    ++count;
  }
  text += fmt::format("order {}\n", count) + order;
  text += fmt::format("pattern {}\n", PatternName(record.pattern));

  const std::string tmp = path.string() + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return Status::FromErrno(errno, "create " + tmp);
  for (size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "write " + tmp);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) < 0) return Status::FromErrno(errno, "fsync " + tmp);
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) < 0) return Status::FromErrno(errno, "rename " + tmp);
  return Status::Ok();
}

Result<EpochRecord> LoadEpochRecord(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path.string());
  auto bad = [&](const std::string& why) {
    return Status::Corruption(fmt::format("{}: {}", path.string(), why));
  };
  std::string line;
  if (!std::getline(in, line) || line != "epochfs-epochs 1") return bad("bad header");
  size_t n = 0;
  if (!std::getline(in, line) || std::sscanf(line.c_str(), "files %zu", &n) != 1) {
    return bad("no file count");
  }
  EpochRecord record;
  record.files.reserve(std::min<size_t>(n, 1u << 24));
  for (size_t i = 0; i < n; ++i) {
    if (!std::getline(in, line)) return bad("truncated file list");
    unsigned long long dev = 0, ino = 0;
    int used = 0;
    if (std::sscanf(line.c_str(), "%llu %llu %n", &dev, &ino, &used) != 2 || used <= 0 ||
        static_cast<size_t>(used) >= line.size()) {
      return bad(fmt::format("bad file line {}", i + 3));
    }
    record.files.emplace_back(FileKey{dev, ino}, line.substr(static_cast<size_t>(used)));
  }
  size_t m = 0;
  if (!std::getline(in, line) || std::sscanf(line.c_str(), "order %zu", &m) != 1) {
    return bad("no order count");
  }
  record.order.reserve(std::min<size_t>(m, 1u << 24));
  for (size_t i = 0; i < m; ++i) {
    unsigned long idx = 0;
    if (!std::getline(in, line) || std::sscanf(line.c_str(), "%lu", &idx) != 1 || idx >= n) {
      return bad("bad order line");
    }
    record.order.push_back(static_cast<uint32_t>(idx));
  }
  // Optional (records written before it existed lack it); an unknown name is ignored.
  if (std::getline(in, line) && line.rfind("pattern ", 0) == 0) {
    const std::string name = line.substr(8);
    for (Pattern p : {Pattern::kSequential, Pattern::kReplay, Pattern::kShuffled,
                      Pattern::kPublished}) {
      if (name == PatternName(p)) record.pattern = p;
    }
  }
  return record;
}

}  // namespace epochfs::prefetch
