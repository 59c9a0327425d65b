#include "prefetcher/testing/dir_source_tree.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>

namespace epochfs::prefetch::testing {

Result<OpenedFile> DirSourceTree::Open(const std::string& path) const {
  {
    MutexLock lock(mu_);
    opened_.push_back(path);
  }
  if (root_.empty()) return Status::NotFound("no source directory");
  UniqueFd fd(::open((root_ / path).c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return Status::FromErrno(errno, "open " + path);
  struct ::stat st {};
  if (::fstat(fd.get(), &st) < 0) return Status::FromErrno(errno, "fstat " + path);
  return OpenedFile{std::move(fd), cache::SourceIdentity::FromStat(st)};
}

Result<cache::SourceIdentity> DirSourceTree::Stat(const std::string& path) const {
  {
    MutexLock lock(mu_);
    stated_.push_back(path);
  }
  if (root_.empty()) return Status::NotFound("no source directory");
  struct ::stat st {};
  if (::stat((root_ / path).c_str(), &st) < 0) return Status::FromErrno(errno, "stat " + path);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + " is not a regular file");
  return cache::SourceIdentity::FromStat(st);
}

Result<std::vector<std::string>> DirSourceTree::ListDir(const std::string& dir) const {
  if (root_.empty() || !can_list_) return Status::NotFound("listing is off");
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root_ / dir, ec)) {
    if (e.is_regular_file()) names.push_back(e.path().filename().string());
  }
  if (ec) return Status::FromErrno(ec.value(), "list " + dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> DirSourceTree::opened() const {
  MutexLock lock(mu_);
  return opened_;
}

std::vector<std::string> DirSourceTree::stated() const {
  MutexLock lock(mu_);
  return stated_;
}

}  // namespace epochfs::prefetch::testing
