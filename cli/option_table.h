// The mount options, one row each: the single place that says which options exist and
// how each is written on every surface that takes it.
//
// `epochfs mount` flags (cli/mount_flags.h), config file keys (cli/config.h) and fstab
// options (cli/fstab_options.h) are all generated from this table, and the flags given on
// the command line override the file row by row. A row names the surfaces it appears on;
// a surface it lacks stays empty (`--foreground` has no config key, `source` no fstab
// option, `--config` no MountOptions field). To add an option, add a row here and a line
// to systemd/epochfs.conf.example if it has a config key; the pins in
// tests/interface_test.cc then say what changed for users.
//
// Thread-safety: the table is built once on first use and never changes; everything
// here is safe to call from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/options.h"

namespace epochfs::cli {

// How an option's value is written, which decides how each surface parses it.
enum class OptionType {
  kBool,      // a flag (--read-only), a bare fstab option (ro), true/false in the file
  kSize,      // "8G", "512M", "4096" (daemon::ParseSize); the file may also hold bytes
  kInteger,   // a whole number in min..max
  kSeconds,   // a number of seconds in 0..86400, fractions allowed
  kPath,      // a file or folder; the file refuses an empty one
  kOneOf,     // one of `choices`
  kHostPort,  // "HOST:PORT" (daemon::ParseListenAddress checks it fully before mounting)
};

// A value parsed from one surface, handed to a row's `apply`. Only the member of the
// row's type is meaningful.
struct OptionValue {
  bool boolean = false;  // kBool, already inverted for `flag_turns_off` rows
  uint64_t number = 0;   // kSize (bytes), kInteger
  double seconds = 0;    // kSeconds
  std::string text;      // kPath, kOneOf, kHostPort
};

// Every member has a default (`= {}`), so a row names only the surfaces it is on.
struct OptionRow {
  // The `epochfs mount` flag as CLI11 names it: "--ram", "-f,--foreground", or "SOURCE"
  // for a positional argument. Empty: not on the command line.
  std::string flag = {};
  // Command line only: a flag this one cannot be given with.
  std::string excludes = {};
  // The config file key. Empty: not in the file.
  std::string toml_key = {};
  // fstab (-o) names; a kBool row's are bare options, the others take `=value`.
  // Empty: not an fstab option.
  std::vector<std::string> fstab_keys = {};
  OptionType type = OptionType::kPath;
  // kBool only: the flag and the fstab option set the field to false (--no-io-uring),
  // while the file names the field itself (io_uring = false).
  bool flag_turns_off = false;
  // kInteger and kSize: the accepted range. The file checks it for both; the command
  // line checks it for kInteger only, because its sizes never were (ResolveAndValidate
  // refuses a bad chunk size either way).
  uint64_t min = 0;
  uint64_t max = UINT64_MAX;
  std::vector<std::string> choices = {};  // kOneOf
  // The flag's line in `epochfs mount --help`, and the default it shows (empty: none).
  std::string help = {};
  std::string help_default = {};
  // Sets the MountOptions field(s). Null for rows that steer the command instead of the
  // mount (--config, --config-if-exists).
  void (*apply)(const OptionValue& value, daemon::MountOptions& options) = nullptr;
};

// Every mount option, in the order `epochfs mount --help` lists them.
const std::vector<OptionRow>& MountOptionTable();

// The row with this config key, or null.
const OptionRow* FindByTomlKey(const std::string& key);

// The long flag of a row ("--foreground" for "-f,--foreground"; "SOURCE" for SOURCE).
std::string LongFlag(const OptionRow& row);

// A size as a person writes it: 4096 -> "4K", 1073741824 -> "1G", 1000 -> "1000".
std::string FormatSize(uint64_t bytes);

}  // namespace epochfs::cli
