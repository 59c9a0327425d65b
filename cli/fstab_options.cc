#include "cli/fstab_options.h"

#include <set>

#include "cli/option_table.h"
#include "fmt/format.h"

namespace epochfs::cli {
namespace {

// The table row with fstab name `key`, or null.
const OptionRow* FindFstabOption(const std::string& key) {
  for (const OptionRow& row : MountOptionTable()) {
    for (const std::string& name : row.fstab_keys) {
      if (name == key) return &row;
    }
  }
  return nullptr;
}

// "ram=, disk=, ..., ro, allow_other, ...": what a person may write, for the refusal of
// an unknown option.
std::string FstabOptionList() {
  std::vector<std::string> with_value, bare;
  for (const OptionRow& row : MountOptionTable()) {
    for (const std::string& name : row.fstab_keys) {
      if (row.type == OptionType::kBool) {
        bare.push_back(name);
      } else {
        with_value.push_back(name + "=");
      }
    }
  }
  return fmt::format("{}, {}", fmt::join(with_value, ", "), fmt::join(bare, ", "));
}

// mount(8)'s, systemd's and the VFS's business: fstab may carry them, epochfs has
// nothing to do with them (it always mounts nodev-free FUSE with noatime, and passes
// writes through unless ro).
bool Ignored(const std::string& key) {
  static const std::set<std::string> kIgnored = {
      "_netdev", "defaults", "auto",   "noauto",  "nofail",   "user",   "users", "nouser",
      "owner",   "group",    "rw",     "noatime", "relatime", "atime",  "nodev", "dev",
      "nosuid",  "suid",     "noexec", "exec",    "async",    "silent", "loud",  "comment"};
  return kIgnored.count(key) > 0 || key.rfind("x-", 0) == 0;
}

}  // namespace

Result<HelperInvocation> ParseHelperArgs(const std::vector<std::string>& args) {
  HelperInvocation inv;
  std::vector<std::string> positional;
  auto add_options = [&](const std::string& list) {
    size_t start = 0;
    while (start <= list.size()) {
      size_t comma = list.find(',', start);
      if (comma == std::string::npos) comma = list.size();
      if (comma > start) inv.options.push_back(list.substr(start, comma - start));
      start = comma + 1;
    }
  };
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    if (a == "-o") {
      if (i + 1 >= args.size()) return Status::InvalidArgument("-o needs an option list");
      add_options(args[++i]);
    } else if (a.rfind("-o", 0) == 0) {
      add_options(a.substr(2));
    } else if (a.size() > 1 && a[0] == '-') {
      for (size_t c = 1; c < a.size(); c++) {
        switch (a[c]) {
          case 's':
            inv.sloppy = true;
            break;
          case 'f':
            inv.fake = true;
            break;
          case 'n':
            break;  // no /etc/mtab to write: the kernel's table is the truth
          case 'v':
            inv.verbose = true;
            break;
          default:
            return Status::InvalidArgument(fmt::format("unknown flag -{}", a[c]));
        }
      }
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2) {
    return Status::InvalidArgument("usage: mount.epochfs SOURCE MOUNTPOINT [-sfnv] [-o OPTIONS]");
  }
  inv.source = positional[0];
  inv.mountpoint = positional[1];
  return inv;
}

Result<std::vector<std::string>> TranslateFstabOptions(const HelperInvocation& inv) {
  std::vector<std::string> out = {"mount", inv.source, inv.mountpoint};
  for (const std::string& opt : inv.options) {
    const size_t eq = opt.find('=');
    const std::string key = opt.substr(0, eq);
    if (Ignored(key)) continue;
    const OptionRow* row = FindFstabOption(key);
    if (row != nullptr) {
      const bool bare = row->type == OptionType::kBool;
      if (bare && eq != std::string::npos) {
        return Status::InvalidArgument(fmt::format("option '{}' takes no value", key));
      }
      if (!bare && eq == std::string::npos) {
        return Status::InvalidArgument(fmt::format("option '{}' needs a value ({}=...)", key, key));
      }
      out.push_back(LongFlag(*row));
      if (bare) continue;
      // The value is handed on untouched: `epochfs mount` checks it.
      const std::string value = opt.substr(eq + 1);
      if (value.empty()) {
        return Status::InvalidArgument(fmt::format("option '{}' has an empty value", key));
      }
      out.push_back(value);
      continue;
    }
    if (inv.sloppy) continue;
    return Status::InvalidArgument(
        fmt::format("unknown option '{}' (epochfs options: {})", opt, FstabOptionList()));
  }
  return out;
}

}  // namespace epochfs::cli
