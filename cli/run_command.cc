#include "cli/run_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "cli/exit.h"

namespace epochfs::cli {

namespace fsys = std::filesystem;

RunHookDirs FindRunHookDirs() {
  if (const char* dir = std::getenv("EPOCHFS_RUN_HOOK_DIR"); dir != nullptr && *dir != '\0') {
    return RunHookDirs{dir, ""};
  }
  std::error_code ec;
  const fsys::path exe = fsys::read_symlink("/proc/self/exe", ec);
#ifdef EPOCHFS_BUILD_DIR
  // A binary of the build tree uses the hook and the package built beside it.
  const std::string build = EPOCHFS_BUILD_DIR;
  if (!ec && exe.string().rfind(build + "/", 0) == 0) {
    return RunHookDirs{build + "/loader/python-run", build + "/loader/python"};
  }
#endif
  // Installed: PREFIX/bin/epochfs -> PREFIX/share/epochfs/python-run.
  const fsys::path prefix = ec ? fsys::path("/usr") : exe.parent_path().parent_path();
  return RunHookDirs{(prefix / "share" / "epochfs" / "python-run").string(), ""};
}

std::string RunPythonPath(const RunHookDirs& dirs, const std::string& inherited) {
  std::string path = dirs.hook;
  if (!dirs.package.empty()) path += ":" + dirs.package;
  if (!inherited.empty()) path += ":" + inherited;
  return path;
}

namespace {

// Replaces this process with `command`; returns only if that fails, with env(1)'s exit
// code (127: not found, 126: not executable) after saying why.
int Exec(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  const int err = errno;
  std::cerr << "epochfs: error: cannot run " << command[0] << ": " << std::strerror(err) << "\n";
  return err == ENOENT ? 127 : 126;
}

}  // namespace

int RunCommand(const std::vector<std::string>& command) {
  if (command.empty()) return Refuse("run needs a COMMAND (epochfs run -- python train.py)");
  const RunHookDirs dirs = FindRunHookDirs();
  std::error_code ec;
  if (!fsys::exists(fsys::path(dirs.hook) / "sitecustomize.py", ec)) {
    std::cerr << "epochfs: warning: no run hook in " << dirs.hook
              << " (a broken installation?): running the command without it\n";
  } else {
    const char* inherited = std::getenv("PYTHONPATH");
    const std::string path = RunPythonPath(dirs, inherited ? inherited : "");
    ::setenv("PYTHONPATH", path.c_str(), 1);
  }
  return Exec(command);
}

int PythonHookCommand(const std::string& python, const std::vector<std::string>& args) {
  const RunHookDirs dirs = FindRunHookDirs();
  // From a build tree the module's folder (argv[1]; empty when installed) is put on the
  // path of this one command, not in PYTHONPATH: what `enable` and `status` then check
  // a fresh interpreter for is what the scripts will see.
  const std::string bootstrap =
      "import sys\n"
      "if sys.argv[1]:\n"
      "    sys.path.insert(0, sys.argv[1])\n"
      "try:\n"
      "    import epochfs_autohook\n"
      "except ImportError as e:\n"
      "    sys.exit(f'epochfs python-hook: {sys.executable} cannot import epochfs_autohook ({e}): "
      "install the epochfs Python package for it')\n"
      "sys.exit(epochfs_autohook.main(sys.argv[2:]))\n";
  std::vector<std::string> command = {python, "-c", bootstrap, dirs.package};
  command.insert(command.end(), args.begin(), args.end());
  return Exec(command);
}

}  // namespace epochfs::cli
