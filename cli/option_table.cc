#include "cli/option_table.h"

#include <algorithm>

#include "fmt/format.h"

namespace epochfs::cli {

using daemon::Consistency;
using daemon::MountOptions;

namespace {

using enum OptionType;

std::vector<OptionRow> BuildTable() {
  // Designated initializers keep each row readable: a field left out is "not on that
  // surface" (an empty name) or "no default shown".
  return {
      {.flag = "SOURCE",
       .toml_key = "source",
       .type = kPath,
       .help = "The data set folder (or `source` in --config)",
       .apply = [](const OptionValue& v, MountOptions& o) { o.source = v.text; }},
      {.flag = "MOUNTPOINT",
       .toml_key = "mountpoint",
       .type = kPath,
       .help = "Where to mount (default: SOURCE itself)",
       .apply = [](const OptionValue& v, MountOptions& o) { o.mountpoint = v.text; }},
      {.flag = "--cache-dir",
       .toml_key = "cache_dir",
       .fstab_keys = {"cache_dir"},
       .type = kPath,
       .help = "The SSD tier (default: /var/cache/epochfs/<source>-<hash>)",
       .apply = [](const OptionValue& v, MountOptions& o) { o.cache_dir = v.text; }},
      {.flag = "--ram",
       .toml_key = "ram",
       .fstab_keys = {"ram"},
       .type = kSize,
       // Below a few chunks the RAM tier cannot hold what one read needs.
       .min = 4u << 20,  // as daemon::ResolveAndValidate checks
       .help = "Memory budget for everything the daemon holds, e.g. 8G (at least 4M)",
       .help_default = "1G",
       .apply = [](const OptionValue& v, MountOptions& o) { o.ram_budget = v.number; }},
      {.flag = "--disk",
       .toml_key = "disk",
       .fstab_keys = {"disk"},
       .type = kSize,
       .help = "SSD tier budget, e.g. 200G (default: half the free space); 0: no SSD tier, "
               "RAM only",
       .apply =
           [](const OptionValue& v, MountOptions& o) {
             o.disk_budget = v.number;
             o.disk_budget_set = true;
           }},
      {.flag = "--chunk-size",
       .toml_key = "chunk_size",
       .fstab_keys = {"chunk_size"},
       .type = kSize,
       .min = 4096,
       .max = 64u << 20,  // as daemon::ResolveAndValidate checks
       .help = "Files up to this size are cached whole; larger ones in chunks of it",
       .help_default = "1M",
       .apply =
           [](const OptionValue& v, MountOptions& o) {
             o.chunk_size = static_cast<uint32_t>(v.number);
           }},
      {.flag = "--readahead",
       .toml_key = "readahead",
       .fstab_keys = {"readahead"},
       .type = kSize,
       .help = "Kernel readahead for the mount (0 keeps the kernel's default)",
       .help_default = "1M",
       .apply = [](const OptionValue& v, MountOptions& o) { o.readahead = v.number; }},
      {.flag = "--prefetch",
       .toml_key = "prefetch",
       .fstab_keys = {"prefetch"},
       .type = kInteger,
       .min = 0,
       .max = 64,
       .help = "Files read ahead at once by the prefetcher (0: no readahead at all)",
       .help_default = "4",
       .apply =
           [](const OptionValue& v, MountOptions& o) {
             o.prefetch_threads = static_cast<uint32_t>(v.number);
           }},
      {.flag = "--prefetch-iops",
       .toml_key = "prefetch_iops",
       .fstab_keys = {"prefetch_iops"},
       .type = kInteger,
       .help = "Most source reads per second readahead may use, leaving the rest to demand "
               "reads (0: no limit)",
       .apply = [](const OptionValue& v, MountOptions& o) { o.prefetch_iops = v.number; }},
      {.flag = "--no-prefetch-pacing",
       .toml_key = "prefetch_pacing",
       .fstab_keys = {"no_prefetch_pacing"},
       .type = kBool,
       .flag_turns_off = true,
       .help = "Let readahead read the source as fast as it can, instead of pacing it below "
               "the rate at which its reads start to queue behind each other",
       .apply = [](const OptionValue& v, MountOptions& o) { o.prefetch_pacing = v.boolean; }},
      {.flag = "--no-page-cache-push",
       .toml_key = "page_cache_push",
       .fstab_keys = {"no_page_cache_push"},
       .type = kBool,
       .flag_turns_off = true,
       .help = "Keep readahead's bytes in the daemon's RAM tier, instead of moving them on into "
               "the kernel's page cache, where a read of them costs no request to the daemon",
       .apply = [](const OptionValue& v, MountOptions& o) { o.page_cache_push = v.boolean; }},
      {.flag = "--passthrough",
       .toml_key = "passthrough",
       .fstab_keys = {"passthrough"},
       .type = kBool,
       .help = "Let the kernel read files no cache tier holds straight from the source (FUSE "
               "passthrough, Linux 6.12+, --consistency open), and cache them in idle CPU "
               "time: for sources as fast as the cache",
       .apply = [](const OptionValue& v, MountOptions& o) { o.passthrough = v.boolean; }},
      {.flag = "--fuse-uring",
       .toml_key = "fuse_uring",
       .fstab_keys = {"fuse_uring"},
       .type = kBool,
       .help = "Experimental: take FUSE requests through io_uring where the kernel offers it "
               "(Linux 6.14+ with the fuse module's enable_uring set); a torture test has "
               "read one wrong byte this way, so not for data that matters yet",
       .apply = [](const OptionValue& v, MountOptions& o) { o.fuse_uring = v.boolean; }},
      {.flag = "--prefetch-bandwidth",
       .toml_key = "prefetch_bandwidth",
       .fstab_keys = {"prefetch_bandwidth"},
       .type = kSize,
       .help = "Most source bytes per second readahead may use, e.g. 100M (default: no "
               "limit)",
       .apply = [](const OptionValue& v, MountOptions& o) { o.prefetch_bandwidth = v.number; }},
      {.flag = "-f,--foreground",
       .type = kBool,
       .help = "Stay in the foreground",
       .apply = [](const OptionValue& v, MountOptions& o) { o.foreground = v.boolean; }},
      {.flag = "--read-only",
       .toml_key = "read_only",
       .fstab_keys = {"read_only", "ro"},
       .type = kBool,
       .help = "Refuse writes with EROFS",
       .apply = [](const OptionValue& v, MountOptions& o) { o.read_only = v.boolean; }},
      {.flag = "--allow-other",
       .toml_key = "allow_other",
       .fstab_keys = {"allow_other"},
       .type = kBool,
       .help = "Let other users use the mount (permissions still apply)",
       .apply = [](const OptionValue& v, MountOptions& o) { o.allow_other = v.boolean; }},
      {.flag = "--log-level",
       .toml_key = "log_level",
       .fstab_keys = {"log_level"},
       .type = kOneOf,
       .choices = {"trace", "debug", "info", "warn", "error", "off"},
       .help = "trace, debug, info, warn, error, off",
       .help_default = "info",
       .apply = [](const OptionValue& v, MountOptions& o) { o.log_level = v.text; }},
      {.flag = "--log-file",
       .toml_key = "log_file",
       .fstab_keys = {"log_file"},
       .type = kPath,
       .help = "Log here (default: stderr in the foreground, CACHE_DIR/epochfs.log otherwise)",
       .apply = [](const OptionValue& v, MountOptions& o) { o.log_file = v.text; }},
      {.flag = "--attr-timeout",
       .toml_key = "attr_timeout",
       .fstab_keys = {"attr_timeout"},
       .type = kSeconds,
       .help = "Seconds the kernel trusts attributes",
       .help_default = "60",
       .apply = [](const OptionValue& v, MountOptions& o) { o.timeouts.attr_s = v.seconds; }},
      {.flag = "--entry-timeout",
       .toml_key = "entry_timeout",
       .fstab_keys = {"entry_timeout"},
       .type = kSeconds,
       .help = "Seconds the kernel trusts names",
       .help_default = "60",
       .apply = [](const OptionValue& v, MountOptions& o) { o.timeouts.entry_s = v.seconds; }},
      {.flag = "--threads",
       .toml_key = "threads",
       .fstab_keys = {"threads"},
       .type = kInteger,
       .min = 1,
       .max = 1024,
       .help = "Most FUSE worker threads",
       .help_default = "16",
       .apply =
           [](const OptionValue& v, MountOptions& o) {
             o.max_threads = static_cast<unsigned>(v.number);
           }},
      {.flag = "--consistency",
       .toml_key = "consistency",
       .fstab_keys = {"consistency"},
       .type = kOneOf,
       .choices = {"auto", "open", "notify"},
       .help = "How changes made underneath reach readers: notify (inotify; no request per "
               "open), open (every open re-checks the source), auto (notify on local "
               "filesystems, open on network ones)",
       .help_default = "auto",
       .apply =
           [](const OptionValue& v, MountOptions& o) {
             o.consistency = v.text == "open"     ? Consistency::kOpen
                             : v.text == "notify" ? Consistency::kNotify
                                                  : Consistency::kAuto;
           }},
      {.flag = "--no-io-uring",
       .toml_key = "io_uring",
       .fstab_keys = {"no_io_uring"},
       .type = kBool,
       .flag_turns_off = true,
       .help = "Read with pread instead of io_uring",
       .apply = [](const OptionValue& v, MountOptions& o) { o.use_io_uring = v.boolean; }},
      {.flag = "--isatty-guard",
       .toml_key = "isatty_guard",
       .fstab_keys = {"isatty_guard"},
       .type = kOneOf,
       .choices = {"auto", "off"},
       .help = "isatty() of the mount's files: auto answers it in the kernel where the BPF "
               "LSM lets the daemon load its program, off sends each one to the daemon",
       .help_default = "auto",
       .apply = [](const OptionValue& v, MountOptions& o) { o.isatty_guard = v.text != "off"; }},
      // The file cannot name another file; fstab can name one.
      {.flag = "--config",
       .fstab_keys = {"config"},
       .type = kPath,
       .help = "Read options from this TOML file; flags given here override it"},
      {.flag = "--config-if-exists",
       .excludes = "--config",
       .type = kPath,
       .help = "Like --config, but a missing file is no error (what the systemd unit uses)"},
      {.flag = "--metrics-listen",
       .toml_key = "metrics_listen",
       .fstab_keys = {"metrics_listen"},
       .type = kHostPort,
       .help = "Serve Prometheus metrics at http://HOST:PORT/metrics (loopback only unless "
               "--metrics-allow-remote)",
       .apply = [](const OptionValue& v, MountOptions& o) { o.metrics_listen = v.text; }},
      {.flag = "--metrics-allow-remote",
       .toml_key = "metrics_allow_remote",
       .fstab_keys = {"metrics_allow_remote"},
       .type = kBool,
       .help = "Allow a non-loopback --metrics-listen host",
       .apply =
           [](const OptionValue& v, MountOptions& o) { o.metrics_allow_remote = v.boolean; }},
      {.flag = "--metrics-textfile",
       .toml_key = "metrics_textfile",
       .fstab_keys = {"metrics_textfile"},
       .type = kPath,
       .help = "Write Prometheus metrics to this file every 10 s (node-exporter textfile "
               "collector)",
       .apply = [](const OptionValue& v, MountOptions& o) { o.metrics_textfile = v.text; }},
  };
}

}  // namespace

const std::vector<OptionRow>& MountOptionTable() {
  static const std::vector<OptionRow> table = BuildTable();
  return table;
}

const OptionRow* FindByTomlKey(const std::string& key) {
  for (const OptionRow& row : MountOptionTable()) {
    if (!row.toml_key.empty() && row.toml_key == key) return &row;
  }
  return nullptr;
}

std::string LongFlag(const OptionRow& row) {
  const size_t comma = row.flag.rfind(',');
  return comma == std::string::npos ? row.flag : row.flag.substr(comma + 1);
}

std::string FormatSize(uint64_t bytes) {
  static const char kSuffixes[] = {'K', 'M', 'G', 'T'};
  if (bytes == 0 || bytes % 1024 != 0) return fmt::format("{}", bytes);
  int i = -1;
  while (i < 3 && bytes % 1024 == 0) {
    bytes /= 1024;
    i++;
  }
  return fmt::format("{}{}", bytes, kSuffixes[i]);
}

}  // namespace epochfs::cli
