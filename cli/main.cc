// The epochfs command line: mount, umount, status, top, warm, run (each subcommand's work is
// in its own file; this one parses and dispatches).
//
// Exit codes: 0 success; 2 bad input or a refused mount (a one-line message says why,
// nothing is left mounted or created); 1 a failure while running.
#include <filesystem>
#include <string>

#include "CLI/CLI.hpp"
#include "cli/config.h"
#include "cli/exit.h"
#include "cli/mount_command.h"
#include "cli/mount_flags.h"
#include "cli/run_command.h"
#include "cli/status.h"
#include "cli/top.h"
#include "cli/warm.h"
#include "daemon/mount_table.h"
#include "daemon/options.h"

#ifndef EPOCHFS_VERSION
#define EPOCHFS_VERSION "dev"
#endif

namespace {

using epochfs::Result;
using epochfs::Status;
namespace cli = epochfs::cli;
namespace daemon = epochfs::daemon;
namespace fsys = std::filesystem;
using cli::Refuse;

int MountOptionsFromFileAndFlags(const cli::MountFlags& flags, daemon::MountOptions& options) {
  options = daemon::MountOptions();
  const std::string path = flags.ConfigPath();
  std::error_code ec;
  if (!path.empty() && (!flags.ConfigMayBeMissing() || fsys::exists(path, ec))) {
    Status st = cli::ApplyConfigFile(path, options, nullptr);
    if (!st.ok()) return Refuse(st.message());
  }
  // A missing SOURCE is reported before a bad flag value, as it always was.
  Status given = flags.ApplyGiven(options);
  if (options.source.empty()) {
    return Refuse("mount needs a SOURCE (on the command line or as `source` in --config)");
  }
  if (!given.ok()) return Refuse(given.message());
  return 0;
}


}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"epochfs: a caching filesystem that feeds training data to GPUs"};
  app.set_version_flag("--version", std::string("epochfs ") + EPOCHFS_VERSION);
  app.require_subcommand(1);

  auto* mount = app.add_subcommand("mount", "Mount SOURCE, over itself unless MOUNTPOINT is given");
  // Every flag of `mount` comes from the option table (cli/option_table.h).
  cli::MountFlags mount_flags(mount);

  cli::TopOptions top_options;
  std::string top_target;
  auto* top = app.add_subcommand("top", "A live view of one epochfs mount");
  top->add_option("MOUNTPOINT", top_target, "The mount (default: the only epochfs mount)");
  top->add_option("-i,--interval", top_options.interval_s, "Seconds between frames")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  top->add_flag("--once", top_options.once, "Draw one frame and exit");

  cli::UmountOptions umount_options;
  std::string umount_target;
  auto* umount = app.add_subcommand("umount", "Unmount an epochfs mount and wait for its daemon");
  umount->alias("unmount");
  umount->add_option("MOUNTPOINT", umount_target, "The mount")->required();
  umount->add_flag("-l,--lazy", umount_options.lazy, "Detach now, finish when no longer busy");
  umount->add_flag("--abort", umount_options.abort,
                   "First abort the FUSE connection (requests in flight fail): for a mount "
                   "whose daemon no longer answers");
  // ---- systemd ExecStopPost ----
  umount->add_flag("--dead-only", umount_options.dead_only,
                   "Only unmount if its daemon is gone (Transport endpoint is not connected)");

  bool json = false;
  std::string status_target;
  auto* status = app.add_subcommand("status", "Counters of one epochfs mount, or of all");
  status->add_option("MOUNTPOINT", status_target, "The mount (default: every epochfs mount)");
  status->add_flag("--json", json, "Machine-readable output");

  // ---- warm (implementation in cli/warm.cc) ----
  cli::WarmOptions warm_options;
  std::string warm_target;
  auto* warm = app.add_subcommand("warm", "Load files of a mount into its cache (resumable)");
  warm->add_option("MOUNTPOINT", warm_target, "The mount")->required();
  warm->add_option("PATH", warm_options.paths, "Files or folders inside it (default: all)");
  warm->add_flag("--ram", warm_options.ram, "Also keep them in RAM (the page cache too) while they fit");
  warm->add_option("-j,--threads", warm_options.threads, "Parallel readers")->capture_default_str();

  // ---- run (cli/run_command.h) ----
  // Everything after `run` (and an optional `--`) is COMMAND, verbatim. CLI11 would take a
  // `--` for its own and move COMMAND's options around, so the command is cut off before
  // parsing and CLI11 sees `run` alone (or `run --help`).
  auto* run = app.add_subcommand(
      "run", "Run COMMAND so that its torch DataLoaders publish each epoch's order");
  std::vector<std::string> run_command;
  // For --help only: CLI11 never sees COMMAND (below).
  run->add_option("COMMAND", run_command, "The command and its arguments, verbatim (after --)");
  // ---- python-hook (cli/run_command.h) ----
  std::string hook_action, hook_dir, hook_python = "python3";
  bool hook_user = false;
  auto* python_hook = app.add_subcommand(
      "python-hook", "Let every script a Python starts publish its DataLoader orders (no epochfs run)");
  python_hook->add_option("ACTION", hook_action, "enable, disable or status")
      ->required()
      ->check(CLI::IsMember({"enable", "disable", "status"}));
  auto* hook_user_flag =
      python_hook->add_flag("--user", hook_user, "The user's site-packages, not the interpreter's");
  python_hook->add_option("--dir", hook_dir, "This site-packages folder")->excludes(hook_user_flag);
  python_hook->add_option("--python", hook_python, "The interpreter (a venv's python)")
      ->capture_default_str();

  int parse_argc = argc;
  if (argc >= 2 && std::string_view(argv[1]) == "run") {
    run_command.assign(argv + 2, argv + argc);
    const bool help = !run_command.empty() && (run_command[0] == "-h" || run_command[0] == "--help");
    parse_argc = help ? 3 : 2;
    if (!run_command.empty() && run_command.front() == "--") run_command.erase(run_command.begin());
  }

  // CLI11 would say only "A subcommand is required" for a word it does not know.
  if (argc >= 2 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known += (known.empty() ? "" : ", ") + sub->get_name();
      found = found || sub->check_name(argv[1]);
    }
    if (!found) {
      return Refuse(std::string("unknown command '") + argv[1] + "' (commands: " + known +
                    "; see epochfs --help)");
    }
  }

  try {
    app.parse(parse_argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    return Refuse(what + " (see epochfs --help)");
  }

  if (*mount) {
    daemon::MountOptions mount_options;
    const int config_rc = MountOptionsFromFileAndFlags(mount_flags, mount_options);
    if (config_rc != 0) return config_rc;
    return cli::RunMountCommand(mount_options);
  }
  // ---- epochfs top ----
  if (*top) {
    if (top_target.empty()) {
      // As `status` does without one: the machine's epochfs mounts, here the only one.
      const auto mounts = daemon::EpochfsMounts();
      if (mounts.empty()) return Refuse("top: there is no epochfs mount on this machine");
      if (mounts.size() > 1) {
        std::string names;
        for (const auto& m : mounts) names += "\n  " + m.mountpoint;
        return Refuse("top: " + std::to_string(mounts.size()) +
                      " epochfs mounts; name the one to watch:" + names);
      }
      top_target = mounts.front().mountpoint;
    }
    const fsys::path target = fsys::absolute(top_target).lexically_normal();
    return cli::RunTop(top_options, [&] { return cli::ReadStats(target); }, stdout);
  }
  if (*umount) return cli::RunUmountCommand(umount_target, umount_options);
  if (*status) return cli::RunStatus(status_target, json);
  if (*run) {
    if (run_command.empty()) return Refuse("run: no COMMAND given (epochfs run -- COMMAND [ARGS...])");
    return cli::RunCommand(run_command);
  }
  if (*python_hook) {
    std::vector<std::string> args = {hook_action};
    if (hook_user) args.push_back("--user");
    if (!hook_dir.empty()) args.push_back("--dir=" + hook_dir);  // a folder named -x too
    return cli::PythonHookCommand(hook_python, args);
  }
  if (*warm) {
    warm_options.mountpoint = warm_target;
    return cli::RunWarm(warm_options);
  }
  return Refuse("no command given (see epochfs --help)");
}
