// ScanImageFolder (see loader.h): class folders become labels, as in torchvision.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loader/loader.h"

namespace epochfs::loader {
namespace {

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};
using DirPtr = std::unique_ptr<DIR, DirCloser>;

std::string Join(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

// Lists the non-hidden entries of `dir`, sorted by name.
Result<std::vector<std::string>> ListSorted(const std::string& dir) {
  DirPtr d(::opendir(dir.c_str()));
  if (!d) return Status::FromErrno(errno, "scan " + dir);
  std::vector<std::string> names;
  errno = 0;
  while (struct dirent* e = ::readdir(d.get())) {
    if (e->d_name[0] == '.') continue;  // ".", ".." and hidden entries
    names.emplace_back(e->d_name);
  }
  if (errno != 0) return Status::FromErrno(errno, "scan " + dir);
  std::sort(names.begin(), names.end());
  return names;
}

// Appends the regular files under `dir` (symlinks followed) in os.walk order sorted by
// (folder path, name): the files of a folder come before those of any folder whose
// path sorts after it, which is what sorted(os.walk(...)) gives.
Status Walk(const std::string& dir, int64_t label, Dataset* out) {
  // Collect (folder path, file name) pairs for this subtree, then sort by the pair.
  std::vector<std::pair<std::string, std::string>> files;
  std::vector<std::string> stack = {dir};
  size_t guard = 0;
  while (!stack.empty()) {
    std::string cur = std::move(stack.back());
    stack.pop_back();
    if (++guard > 1000000) {
      return Status(Code::kInvalidArgument,
                    "scan " + dir + ": over a million folders (a symlink loop?)");
    }
    auto names = ListSorted(cur);
    if (!names.ok()) return names.status();
    for (const std::string& name : *names) {
      std::string path = Join(cur, name);
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) continue;  // dangling symlink: skipped, as os.walk does
      if (S_ISDIR(st.st_mode)) {
        stack.push_back(std::move(path));
      } else if (S_ISREG(st.st_mode)) {
        files.emplace_back(cur, name);
      }
    }
  }
  std::sort(files.begin(), files.end());
  for (auto& [folder, name] : files) {
    out->files.push_back(Join(folder, name));
    out->labels.push_back(label);
  }
  return Status::Ok();
}

}  // namespace

Result<Dataset> ScanImageFolder(const std::string& root) {
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) return Status::FromErrno(errno, "scan " + root);
  if (!S_ISDIR(st.st_mode)) {
    return Status(Code::kInvalidArgument, "scan " + root + ": not a folder", ENOTDIR);
  }
  auto names = ListSorted(root);
  if (!names.ok()) return names.status();
  Dataset ds;
  for (const std::string& name : *names) {
    std::string path = Join(root, name);
    if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    Status s = Walk(path, static_cast<int64_t>(ds.classes.size()), &ds);
    if (!s.ok()) return s;
    ds.classes.push_back(name);
  }
  if (ds.classes.empty()) {
    return Status(Code::kNotFound,
                  "scan " + root + ": no class folders (expected root/<class>/<file>)", ENOENT);
  }
  if (ds.files.empty()) {
    return Status(Code::kNotFound, "scan " + root + ": class folders hold no files", ENOENT);
  }
  return ds;
}

}  // namespace epochfs::loader
