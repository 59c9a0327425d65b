// PlanPublisher (see plan_publisher.h).
#include "loader/plan_publisher.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <unordered_map>

#include "base/unique_fd.h"

namespace epochfs::loader {
namespace {

std::string Canonical(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return "";
  return buf;
}

std::string ParentOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool HasPlanFile(const std::string& dir) {
  struct stat st;
  std::string plan = (dir == "/" ? std::string() : dir) + "/.epochfs/plan";
  return ::stat(plan.c_str(), &st) == 0;
}

}  // namespace

std::string FindEpochfsRoot(const std::string& dir) {
  std::string cur = Canonical(dir);
  if (cur.empty()) return "";
  struct stat st;
  if (::stat(cur.c_str(), &st) != 0) return "";
  while (true) {
    if (HasPlanFile(cur)) return cur;
    if (cur == "/") return "";
    std::string parent = ParentOf(cur);
    struct stat pst;
    if (::stat(parent.c_str(), &pst) != 0) return "";
    if (pst.st_dev != st.st_dev) return "";  // `cur` was a mount root: stop there
    cur = std::move(parent);
    st = pst;
  }
}

std::unique_ptr<PlanPublisher> PlanPublisher::ForFiles(const std::vector<std::string>& files) {
  if (files.empty()) return nullptr;
  std::string root = FindEpochfsRoot(ParentOf(files.front()));
  if (root.empty()) return nullptr;
  return std::make_unique<PlanPublisher>(std::move(root), files);
}

PlanPublisher::PlanPublisher(std::string root, const std::vector<std::string>& files)
    : root_(std::move(root)) {
  relative_.reserve(files.size());
  std::unordered_map<std::string, std::string> canonical_dirs;  // folder -> canonical
  const std::string prefix = root_ == "/" ? "/" : root_ + "/";
  for (const std::string& file : files) {
    std::string dir = ParentOf(file);
    auto it = canonical_dirs.find(dir);
    if (it == canonical_dirs.end()) it = canonical_dirs.emplace(dir, Canonical(dir)).first;
    std::string name = file.substr(file.find_last_of('/') + 1);
    std::string full = it->second == "/" ? "/" + name : it->second + "/" + name;
    if (it->second.empty() || full.compare(0, prefix.size(), prefix) != 0 ||
        name.find('\n') != std::string::npos || it->second.find('\n') != std::string::npos) {
      relative_.emplace_back();
      ++unplannable_;
      continue;
    }
    relative_.push_back(full.substr(prefix.size()));
  }
}

std::string PlanPublisher::Format(const std::vector<int64_t>& order) const {
  std::string text = kHeader;
  size_t bytes = text.size();
  for (int64_t i : order) bytes += relative_[static_cast<size_t>(i)].size() + 1;
  text.reserve(bytes);
  for (int64_t i : order) {
    const std::string& rel = relative_[static_cast<size_t>(i)];
    if (rel.empty()) continue;
    text += rel;
    text += '\n';
  }
  text += '\n';  // the empty line ends the plan: epochfs publishes it now (no close needed)
  return text;
}

Status PlanPublisher::Publish(const std::vector<int64_t>& order) const {
  for (int64_t i : order) {
    if (i < 0 || static_cast<size_t>(i) >= relative_.size()) {
      return Status(Code::kInvalidArgument, "plan: index " + std::to_string(i) + " out of range");
    }
  }
  const std::string path = plan_path();
  const std::string text = Format(order);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::FromErrno(errno, "write " + path);
    }
    done += static_cast<size_t>(n);
  }
  return fd.Close("close " + path + " (plan not applied)");
}

}  // namespace epochfs::loader
