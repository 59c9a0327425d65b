// `epochfs run [--] COMMAND [ARGS...]`: runs an unmodified training command so that
// every torch DataLoader in it publishes each epoch's order of files to the epochfs
// mount they live on (loader/python/epochfs/hook.py says how, and what it leaves alone).
//
// It only sets up the child's environment and execs it: the folder holding the run
// hook's sitecustomize.py leads PYTHONPATH (the hook installs itself when the script
// imports torch.utils.data, then runs the sitecustomize it hides), and, from a build
// tree, the folder of the built `epochfs` package follows it. The command's exit status
// is epochfs run's; a command that cannot be started exits 127 (126: not executable),
// as env(1) does.
//
// Thread-safety: replaces the calling process.
#pragma once

#include <string>
#include <vector>

namespace epochfs::cli {

// Where the hook lives for this binary: `python-run` (sitecustomize.py) and, for a build
// tree, the package folder ("" when installed: the package is on python3's own path).
struct RunHookDirs {
  std::string hook;
  std::string package;
};
// EPOCHFS_RUN_HOOK_DIR overrides; else the build tree's folders for a binary of the
// build tree, the installed share/epochfs/python-run otherwise.
RunHookDirs FindRunHookDirs();

// The PYTHONPATH the child gets, given the one it would have had (may be empty).
std::string RunPythonPath(const RunHookDirs& dirs, const std::string& inherited);

// Execs `command` with the hook in its environment; returns only on failure (the exit
// code to use).
int RunCommand(const std::vector<std::string>& command);

// `epochfs python-hook enable|disable|status [--user | --dir DIR] [--python PY]`: the
// same hook for every script interpreter PY starts, through a .pth file in its
// site-packages (loader/python/epochfs_autohook.py). Execs PY on that module; returns
// only on failure.
int PythonHookCommand(const std::string& python, const std::vector<std::string>& args);

}  // namespace epochfs::cli
