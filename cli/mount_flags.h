// The flags of `epochfs mount`, registered with CLI11 from the option table
// (cli/option_table.h), and the merge that lays the flags given over the config file.
//
// main() registers them, parses, reads the config file into a MountOptions and then
// calls ApplyGiven, so a flag overrides the file's value and an absent flag leaves it.
//
// Thread-safety: none; one thread registers, parses and reads a MountFlags.
#pragma once

#include <deque>
#include <string>

#include "base/status.h"
#include "cli/option_table.h"
#include "daemon/options.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace epochfs::cli {

class MountFlags {
 public:
  // Adds a CLI11 option for every table row with a flag to `mount`, which keeps
  // pointers into this object: it must outlive the parse and cannot be copied.
  explicit MountFlags(CLI::App* mount);
  MountFlags(const MountFlags&) = delete;
  MountFlags& operator=(const MountFlags&) = delete;

  // The config file named by --config, else by --config-if-exists; empty: none.
  std::string ConfigPath() const;
  // Whether ConfigPath may be missing (it came from --config-if-exists).
  bool ConfigMayBeMissing() const;

  // Sets in `options` every option whose flag was given. Applies all of them even when
  // one is refused, and returns the first refusal ("--ram: invalid size ...").
  Status ApplyGiven(daemon::MountOptions& options) const;

 private:
  // Where CLI11 stores one flag's value; the member that matches the row's type is used.
  struct Slot {
    const OptionRow* row = nullptr;
    CLI::Option* option = nullptr;
    std::string text;
    uint64_t number = 0;
    double seconds = 0;
    bool flag = false;
  };
  const Slot* Find(const std::string& flag) const;

  std::deque<Slot> slots_;  // a deque: CLI11 holds pointers to the members
};

}  // namespace epochfs::cli
