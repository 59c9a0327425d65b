#include "cli/fstab_options.h"

#include <map>
#include <set>

#include "fmt/format.h"

namespace epochfs::cli {
namespace {

// key=value options and the `epochfs mount` flag each becomes.
const std::map<std::string, std::string>& ValueOptions() {
  static const std::map<std::string, std::string> m = {
      {"ram", "--ram"},
      {"disk", "--disk"},
      {"cache_dir", "--cache-dir"},
      {"chunk_size", "--chunk-size"},
      {"readahead", "--readahead"},
      {"prefetch", "--prefetch"},
      {"prefetch_iops", "--prefetch-iops"},
      {"prefetch_bandwidth", "--prefetch-bandwidth"},
      {"consistency", "--consistency"},
      {"log_level", "--log-level"},
      {"log_file", "--log-file"},
      {"attr_timeout", "--attr-timeout"},
      {"entry_timeout", "--entry-timeout"},
      {"threads", "--threads"},
      {"config", "--config"},
      {"metrics_listen", "--metrics-listen"},
      {"metrics_textfile", "--metrics-textfile"},
  };
  return m;
}

// Options without a value.
const std::map<std::string, std::string>& FlagOptions() {
  static const std::map<std::string, std::string> m = {
      {"ro", "--read-only"},
      {"read_only", "--read-only"},
      {"allow_other", "--allow-other"},
      {"no_io_uring", "--no-io-uring"},
      {"no_prefetch_pacing", "--no-prefetch-pacing"},
      {"metrics_allow_remote", "--metrics-allow-remote"},
  };
  return m;
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
    if (eq == std::string::npos) {
      auto flag = FlagOptions().find(key);
      if (flag != FlagOptions().end()) {
        out.push_back(flag->second);
        continue;
      }
      if (ValueOptions().count(key)) {
        return Status::InvalidArgument(fmt::format("option '{}' needs a value ({}=...)", key, key));
      }
    } else {
      auto value = ValueOptions().find(key);
      if (value != ValueOptions().end()) {
        const std::string v = opt.substr(eq + 1);
        if (v.empty())
          return Status::InvalidArgument(fmt::format("option '{}' has an empty value", key));
        out.push_back(value->second);
        out.push_back(v);
        continue;
      }
      if (FlagOptions().count(key)) {
        return Status::InvalidArgument(fmt::format("option '{}' takes no value", key));
      }
    }
    if (inv.sloppy) continue;
    return Status::InvalidArgument(
        fmt::format("unknown option '{}' (epochfs options: ram=, disk=, cache_dir=, chunk_size=, readahead=, "
                    "prefetch=, prefetch_iops=, prefetch_bandwidth=, "
                    "consistency=, log_level=, log_file=, attr_timeout=, entry_timeout=, threads=, "
                    "config=, metrics_listen=, metrics_textfile=, ro, allow_other, no_io_uring, no_prefetch_pacing)",
                    opt));
  }
  return out;
}

}  // namespace epochfs::cli
