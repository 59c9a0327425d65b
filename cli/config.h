// The configuration file: `/etc/epochfs/<instance>.conf`, TOML, one key per mount
// option (docs/operations.md lists them), read by `epochfs mount --config FILE`. The
// keys, their types and their checks are the rows of cli/option_table.h.
//
// The file sets daemon::MountOptions; flags given on the command line are applied after it
// and so override it. Every error names the file, the line and the key
// ("/etc/epochfs/x.conf:3: key 'ram': bad size \"8Q\"..."), so a service that fails to
// start says exactly what to fix. Unknown keys are errors, not warnings: a misspelt
// `read_onyl = true` must not silently mount read-write.
//
// Thread-safety: pure functions.
#pragma once

#include <filesystem>
#include <set>
#include <string>

#include "base/status.h"
#include "daemon/options.h"

namespace epochfs::cli {

// The keys a config file may hold, as written in the file.
const std::set<std::string>& ConfigKeys();

// Parses TOML `text` (named `filename` in messages) and sets the options it names in
// `options`; `set_keys` (may be null) receives the keys that were present. Options the
// file does not name are left as they are. On error `options` may be partly set.
Status ApplyConfigText(const std::string& text, const std::string& filename, daemon::MountOptions& options,
                       std::set<std::string>* set_keys);

// Reads `path` and applies it as above. A missing file is NotFound.
Status ApplyConfigFile(const std::filesystem::path& path, daemon::MountOptions& options,
                       std::set<std::string>* set_keys);

}  // namespace epochfs::cli
