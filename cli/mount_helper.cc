// mount.epochfs: the helper mount(8) runs for `mount -t epochfs` and fstab lines of
// type epochfs. It translates the -o list into `epochfs mount` flags
// (cli/fstab_options.h) and execs the epochfs binary, which daemonizes and returns once
// the mount is live, as mount(8) expects. `umount` needs no helper: the kernel's
// unmount ends the daemon's loop, and it flushes and exits.
//
// Exit codes: 2 for bad options (one line on stderr, like epochfs itself); otherwise
// epochfs's own.
#include <limits.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli/fstab_options.h"

#ifndef EPOCHFS_INSTALLED_BINARY
#define EPOCHFS_INSTALLED_BINARY "/usr/local/bin/epochfs"
#endif

namespace {

namespace fsys = std::filesystem;

// The epochfs binary: next to this helper (a build tree, or a symlink to one), else
// where `cmake --install` put it, else the first on PATH.
std::string FindEpochfs() {
  std::error_code ec;
  const fsys::path self = fsys::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fsys::path sibling = self.parent_path() / "epochfs";
    if (::access(sibling.c_str(), X_OK) == 0) return sibling;
  }
  if (::access(EPOCHFS_INSTALLED_BINARY, X_OK) == 0) return EPOCHFS_INSTALLED_BINARY;
  return "epochfs";
}

}  // namespace

constexpr const char* kUsage =
    "usage: mount.epochfs SOURCE MOUNTPOINT [-o OPTIONS] [-f] [-n] [-s] [-v]\n"
    "\n"
    "The helper mount(8) runs for `mount -t epochfs` and fstab lines of type epochfs:\n"
    "it turns the -o list into `epochfs mount` flags and runs epochfs, which returns once\n"
    "the mount is live. OPTIONS: epochfs's own (ram=, disk=, cache_dir=, consistency=,\n"
    "read_only, allow_other, ... as in /etc/epochfs/epochfs.conf.example) and mount's\n"
    "generic ones (ro, rw, _netdev, nofail, defaults, ...). -f: say what would run, run\n"
    "nothing; -v: say it and run it. See mount.epochfs(8).\n";

#ifndef EPOCHFS_VERSION
#define EPOCHFS_VERSION "dev"
#endif

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // mount(8) never passes these; a person asking does.
  for (const std::string& a : args) {
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "-V" || a == "--version") {
      std::cout << "mount.epochfs (epochfs " << EPOCHFS_VERSION << ")\n";
      return 0;
    }
  }
  auto inv = epochfs::cli::ParseHelperArgs(args);
  if (!inv.ok()) {
    std::cerr << "mount.epochfs: error: " << inv.status().message() << "\n";
    return 2;
  }
  auto flags = epochfs::cli::TranslateFstabOptions(*inv);
  if (!flags.ok()) {
    std::cerr << "mount.epochfs: error: " << flags.status().message() << "\n";
    return 2;
  }
  const std::string binary = FindEpochfs();
  if (inv->verbose || inv->fake) {
    std::cerr << "mount.epochfs: " << binary;
    for (const auto& f : *flags) std::cerr << " " << f;
    std::cerr << "\n";
  }
  if (inv->fake) return 0;
  std::vector<char*> exec_argv = {const_cast<char*>(binary.c_str())};
  for (auto& f : *flags) exec_argv.push_back(f.data());
  exec_argv.push_back(nullptr);
  ::execvp(exec_argv[0], exec_argv.data());
  std::cerr << "mount.epochfs: error: cannot run " << binary << ": " << strerror(errno) << "\n";
  return 1;
}
