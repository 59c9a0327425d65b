// The user-visible interface of epochfs, pinned name by name: the command line, the
// config file keys, the mount.epochfs (fstab) options, the `.epochfs/stats` JSON (and
// `epochfs status --json`), and the Prometheus metrics.
//
// Every expected list is written out here on purpose. Scripts, fstab lines, config
// files, dashboards and alerts depend on these names, so a change to any of them (a
// restructuring that renames, drops or adds one) must fail here with the names missing
// and extra, and be made here too, deliberately. The lists were generated from the
// binary and checked against docs/operations.md and README.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "tests/mount_fixture.h"

namespace epochfs::testing {
namespace {

using Names = std::set<std::string>;

std::string Join(const Names& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Succeeds when `actual` holds exactly the names of `expected`; otherwise says which
// are missing and which are extra, which is what a reader of a failure needs.
::testing::AssertionResult SameNames(const std::vector<std::string>& expected,
                                     const Names& actual) {
  // A sorted list keeps the pins diffable when one is changed on purpose.
  if (!std::is_sorted(expected.begin(), expected.end())) {
    return ::testing::AssertionFailure() << "the expected list is not sorted";
  }
  const Names want(expected.begin(), expected.end());
  Names missing, extra;
  std::set_difference(want.begin(), want.end(), actual.begin(), actual.end(),
                      std::inserter(missing, missing.end()));
  std::set_difference(actual.begin(), actual.end(), want.begin(), want.end(),
                      std::inserter(extra, extra.end()));
  if (missing.empty() && extra.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "\n  missing (pinned, not found): " << (missing.empty() ? "-" : Join(missing))
         << "\n  extra (found, not pinned):   " << (extra.empty() ? "-" : Join(extra));
}

class InterfaceTest : public MountedDirsTest {};

// ---------------------------------------------------------------------------------
// The command line

// What a person reads in `epochfs [SUBCOMMAND] --help` (CLI11's layout).
struct HelpPage {
  std::string usage;  // after "Usage: ", with the binary's path written as "epochfs"
  Names entries;      // first column of Positionals, Options and Subcommands
  Names defaults;     // "ENTRY=DEFAULT" for each entry that shows a default
};

HelpPage ParseHelp(const std::string& text) {
  HelpPage page;
  std::istringstream in(text);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.rfind("Usage: ", 0) == 0) {
      page.usage = line.substr(7);
      const std::string binary = EPOCHFS_BINARY;
      if (page.usage.rfind(binary, 0) == 0) page.usage.replace(0, binary.size(), "epochfs");
      continue;
    }
    if (!line.empty() && line[0] != ' ' && line.back() == ':') {
      section = line.substr(0, line.size() - 1);
      continue;
    }
    // Entries are indented by two spaces; lines indented deeper continue a description.
    if (section.empty() || line.size() < 3 || line.compare(0, 2, "  ") != 0 || line[2] == ' ') {
      continue;
    }
    // The first column ends at the first run of two spaces, or with the line.
    const std::string column = line.substr(2, line.find("  ", 2) - 2);
    if (section == "Subcommands") {
      page.entries.insert(column);  // "umount, unmount": the name and its aliases
      continue;
    }
    // "--ram TEXT=1G", "-i,--interval FLOAT:FLOAT in [0.05 - 3600]=1", "MOUNTPOINT TEXT".
    const size_t space = column.find(' ');
    const std::string name = column.substr(0, space);
    page.entries.insert(name);
    const size_t equals = column.rfind('=');
    if (space != std::string::npos && equals != std::string::npos && equals > space) {
      page.defaults.insert(name + "=" + column.substr(equals + 1));
    }
  }
  return page;
}

struct CommandInterface {
  std::vector<std::string> command;  // the subcommand; empty for `epochfs` itself
  std::string usage;
  std::vector<std::string> entries;
  std::vector<std::string> defaults;
};

// `epochfs mount` has the most entries: one a line, so a change is a one-line diff.
// clang-format off
const std::vector<std::string> kMountEntries = {
    "--allow-other",
    "--attr-timeout",
    "--cache-dir",
    "--chunk-size",
    "--config",
    "--config-if-exists",
    "--consistency",
    "--disk",
    "--entry-timeout",
    "--fuse-uring",
    "--isatty-guard",
    "--log-file",
    "--log-level",
    "--metrics-allow-remote",
    "--metrics-listen",
    "--metrics-textfile",
    "--no-io-uring",
    "--no-page-cache-push",
    "--no-prefetch-pacing",
    "--passthrough",
    "--prefetch",
    "--prefetch-bandwidth",
    "--prefetch-iops",
    "--ram",
    "--read-only",
    "--readahead",
    "--threads",
    "-f,--foreground",
    "-h,--help",
    "MOUNTPOINT",
    "SOURCE",
};
// clang-format on

const std::vector<CommandInterface> kCommandLine = {
    {{},
     "epochfs [OPTIONS] SUBCOMMAND",
     {"--version", "-h,--help", "mount", "python-hook", "run", "status", "top", "umount, unmount",
      "warm"},
     {}},
    {{"mount"},
     "epochfs mount [OPTIONS] [SOURCE] [MOUNTPOINT]",
     kMountEntries,
     {"--attr-timeout=60", "--chunk-size=1M", "--consistency=auto", "--entry-timeout=60",
      "--isatty-guard=auto", "--log-level=info", "--prefetch=4", "--ram=1G", "--readahead=1M", "--threads=16"}},
    {{"python-hook"},
     "epochfs python-hook [OPTIONS] ACTION",
     {"--dir", "--python", "--user", "-h,--help", "ACTION"},
     {"--python=python3"}},
    {{"run"},
     "epochfs run [OPTIONS] [COMMAND...]",
     {"-h,--help", "COMMAND"},
     {}},
    {{"status"},
     "epochfs status [OPTIONS] [MOUNTPOINT]",
     {"--json", "-h,--help", "MOUNTPOINT"},
     {}},
    {{"top"},
     "epochfs top [OPTIONS] [MOUNTPOINT]",
     {"--once", "-h,--help", "-i,--interval", "MOUNTPOINT"},
     {"-i,--interval=1"}},
    {{"umount"},
     "epochfs umount [OPTIONS] MOUNTPOINT",
     {"--abort", "--dead-only", "-h,--help", "-l,--lazy", "MOUNTPOINT"},
     {}},
    {{"warm"},
     "epochfs warm [OPTIONS] MOUNTPOINT [PATH...]",
     {"--ram", "-h,--help", "-j,--threads", "MOUNTPOINT", "PATH"},
     {"-j,--threads=8"}},
};

TEST(Interface, CommandLineSubcommandsFlagsAndDefaults) {
  for (const CommandInterface& expected : kCommandLine) {
    std::vector<std::string> args = expected.command;
    args.push_back("--help");
    const std::string where =
        "epochfs " + (expected.command.empty() ? "" : expected.command[0] + " ") + "--help";
    const CommandResult r = Epochfs(args);
    ASSERT_EQ(r.exit_code, 0) << where << ": " << r.output;
    const HelpPage page = ParseHelp(r.output);
    EXPECT_EQ(page.usage, expected.usage) << where;
    EXPECT_TRUE(SameNames(expected.entries, page.entries)) << "entries of " << where;
    EXPECT_TRUE(SameNames(expected.defaults, page.defaults)) << "defaults in " << where;
  }
  EXPECT_EQ(Epochfs({"unmount", "--help"}).output, Epochfs({"umount", "--help"}).output)
      << "`unmount` is an alias of `umount`";
  const CommandResult version = Epochfs({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.output.rfind("epochfs ", 0), 0u) << version.output;
  // Bad input: exit code 2 and one line that says so (README, "Usage").
  const CommandResult bad = Epochfs({"mount", "--no-such-flag"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_EQ(bad.output.rfind("epochfs: error: ", 0), 0u) << bad.output;
}

// ---------------------------------------------------------------------------------
// The config file (TOML)

const std::vector<std::string> kConfigKeys = {
    "allow_other",
    "attr_timeout",
    "cache_dir",
    "chunk_size",
    "consistency",
    "disk",
    "entry_timeout",
    "fuse_uring",
    "io_uring",
    "isatty_guard",
    "log_file",
    "log_level",
    "metrics_allow_remote",
    "metrics_listen",
    "metrics_textfile",
    "mountpoint",
    "page_cache_push",
    "passthrough",
    "prefetch",
    "prefetch_bandwidth",
    "prefetch_iops",
    "prefetch_pacing",
    "ram",
    "read_only",
    "readahead",
    "source",
    "threads",
};

std::string Quoted(const fsys::path& path) { return "\"" + path.string() + "\""; }

TEST_F(InterfaceTest, ConfigFileKeys) {
  // An unknown key is refused, and the refusal lists every key there is.
  const fsys::path unknown = dir_ / "unknown.conf";
  WriteFile(unknown, "ram = \"64M\"\nread_onyl = true\n");
  const CommandResult refused = Epochfs({"mount", src_.string(), mnt_.string(), "--cache-dir",
                                         cache_.string(), "--config", unknown.string()});
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_FALSE(IsMounted(mnt_));
  const std::string marker = "key 'read_onyl': unknown key (known: ";
  const size_t start = refused.output.find(marker);
  ASSERT_NE(start, std::string::npos) << refused.output;
  const size_t list_start = start + marker.size();
  std::istringstream list(
      refused.output.substr(list_start, refused.output.find(')', list_start) - list_start));
  Names known;
  for (std::string key; std::getline(list >> std::ws, key, ',');) known.insert(key);
  EXPECT_TRUE(SameNames(kConfigKeys, known)) << "keys listed by the unknown-key error";

  // A file that sets every key, none to its default, mounts.
  WriteFile(src_ / "a.txt", "hello\n");
  const fsys::path log_file = dir_ / "daemon.log";
  const fsys::path textfile = dir_ / "metrics.prom";
  const std::vector<std::pair<std::string, std::string>> every_key = {
      {"allow_other", "true"},
      {"attr_timeout", "5"},
      {"cache_dir", Quoted(cache_)},
      {"chunk_size", "\"512K\""},
      {"consistency", "\"open\""},
      {"disk", "\"768M\""},
      {"entry_timeout", "2.5"},
      {"fuse_uring", "true"},
      {"io_uring", "false"},
      {"isatty_guard", "\"off\""},
      {"log_file", Quoted(log_file)},
      {"log_level", "\"debug\""},
      {"metrics_allow_remote", "true"},
      {"metrics_listen", "\"127.0.0.1:0\""},  // any free port
      {"metrics_textfile", Quoted(textfile)},
      {"mountpoint", Quoted(mnt_)},
      {"page_cache_push", "false"},
      {"passthrough", "true"},
      {"prefetch", "2"},
      {"prefetch_bandwidth", "\"50M\""},
      {"prefetch_iops", "500"},
      {"prefetch_pacing", "false"},
      {"ram", "\"96M\""},
      {"read_only", "true"},
      {"readahead", "\"2M\""},
      {"source", Quoted(src_)},
      {"threads", "4"},
  };
  Names keys_written;
  std::string toml;
  for (const auto& [key, value] : every_key) {
    keys_written.insert(key);
    toml += key + " = " + value + "\n";
  }
  ASSERT_TRUE(SameNames(kConfigKeys, keys_written)) << "the file must set every key";
  const fsys::path conf = dir_ / "every.conf";
  WriteFile(conf, toml);
  const CommandResult r = Epochfs({"mount", "--config", conf.string()});
  UnmountOnExit unmount(mnt_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(IsMounted(mnt_));
  EXPECT_EQ(ReadFile(mnt_ / "a.txt"), "hello\n");
  // The keys whose values the stats show took effect.
  const auto stats = nlohmann::json::parse(ReadFile(mnt_ / ".epochfs" / "stats"));
  const nlohmann::json expected = {
      {"source", fsys::canonical(src_).string()},
      {"mountpoint", fsys::canonical(mnt_).string()},
      {"cache_dir", fsys::canonical(cache_).string()},
      {"ram_budget_bytes", 96ull << 20},
      {"ssd_budget_bytes", 768ull << 20},
      {"prefetch_threads", 2},
      {"prefetch_iops_limit", 500},
      {"prefetch_bandwidth_limit", 50ull << 20},
      {"prefetch_pacing", false},
      {"read_only", true},
      {"io_uring", false},
      {"consistency", "open"},
  };
  for (const auto& [key, value] : expected.items()) {
    EXPECT_EQ(stats.value(key, nlohmann::json()), value) << key;
  }
  EXPECT_EQ(stats.value("isatty", "").rfind("daemon (--isatty-guard off", 0), 0u)
      << stats.value("isatty", "");
  EXPECT_TRUE(fsys::exists(log_file));
  EXPECT_TRUE(fsys::exists(textfile));
}

// ---------------------------------------------------------------------------------
// mount.epochfs: fstab and `mount -t epochfs` options

TEST(Interface, MountHelperOptions) {
  // Each option and the `epochfs mount` arguments it becomes (none: left to mount(8)
  // and systemd).
  const std::vector<std::pair<std::string, std::vector<std::string>>> kOptions = {
      {"_netdev", {}},
      {"allow_other", {"--allow-other"}},
      {"async", {}},
      {"atime", {}},
      {"attr_timeout=1.5", {"--attr-timeout", "1.5"}},
      {"auto", {}},
      {"cache_dir=/nvme/c", {"--cache-dir", "/nvme/c"}},
      {"chunk_size=512K", {"--chunk-size", "512K"}},
      {"comment=x", {}},
      {"config=/etc/epochfs/a.conf", {"--config", "/etc/epochfs/a.conf"}},
      {"consistency=open", {"--consistency", "open"}},
      {"defaults", {}},
      {"dev", {}},
      {"disk=200G", {"--disk", "200G"}},
      {"entry_timeout=2", {"--entry-timeout", "2"}},
      {"exec", {}},
      {"fuse_uring", {"--fuse-uring"}},
      {"isatty_guard=off", {"--isatty-guard", "off"}},
      {"group", {}},
      {"log_file=/var/log/e.log", {"--log-file", "/var/log/e.log"}},
      {"log_level=debug", {"--log-level", "debug"}},
      {"loud", {}},
      {"metrics_allow_remote", {"--metrics-allow-remote"}},
      {"metrics_listen=127.0.0.1:9464", {"--metrics-listen", "127.0.0.1:9464"}},
      {"metrics_textfile=/var/lib/e.prom", {"--metrics-textfile", "/var/lib/e.prom"}},
      {"no_io_uring", {"--no-io-uring"}},
      {"no_page_cache_push", {"--no-page-cache-push"}},
      {"no_prefetch_pacing", {"--no-prefetch-pacing"}},
      {"noatime", {}},
      {"noauto", {}},
      {"nodev", {}},
      {"noexec", {}},
      {"nofail", {}},
      {"nosuid", {}},
      {"nouser", {}},
      {"owner", {}},
      {"passthrough", {"--passthrough"}},
      {"prefetch=8", {"--prefetch", "8"}},
      {"prefetch_bandwidth=100M", {"--prefetch-bandwidth", "100M"}},
      {"prefetch_iops=250", {"--prefetch-iops", "250"}},
      {"ram=8G", {"--ram", "8G"}},
      {"read_only", {"--read-only"}},
      {"readahead=2M", {"--readahead", "2M"}},
      {"relatime", {}},
      {"ro", {"--read-only"}},
      {"rw", {}},
      {"silent", {}},
      {"suid", {}},
      {"threads=4", {"--threads", "4"}},
      {"user", {}},
      {"users", {}},
      {"x-systemd.automount", {}},
  };
  for (const auto& [option, args] : kOptions) {
    // -f: say what would run and run nothing; -n (no mtab) and -v as mount(8) passes them.
    const CommandResult r =
        epochfs::testing::Run({EPOCHFS_MOUNT_HELPER, "/s", "/m", "-f", "-n", "-v", "-o", option});
    ASSERT_EQ(r.exit_code, 0) << option << ": " << r.output;
    // "mount.epochfs: /path/to/epochfs mount /s /m --flag value"
    std::istringstream words(r.output);
    std::string prefix, binary;
    words >> prefix >> binary;
    EXPECT_EQ(prefix, "mount.epochfs:") << option;
    const std::vector<std::string> got{std::istream_iterator<std::string>(words), {}};
    std::vector<std::string> want = {"mount", "/s", "/m"};
    want.insert(want.end(), args.begin(), args.end());
    EXPECT_EQ(got, want) << "-o " << option;
  }
  const CommandResult unknown =
      epochfs::testing::Run({EPOCHFS_MOUNT_HELPER, "/s", "/m", "-f", "-o", "ram=1G,rma=2G"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.output.rfind("mount.epochfs: error: unknown option 'rma=2G'", 0), 0u)
      << unknown.output;
}

// ---------------------------------------------------------------------------------
// .epochfs/stats and `epochfs status --json`

// Every key path of `json`, nested objects joined with dots ("requests.lookup").
void KeyPaths(const nlohmann::json& json, const std::string& prefix, Names& out) {
  for (const auto& [key, value] : json.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (value.is_object()) {
      KeyPaths(value, path, out);
    } else {
      out.insert(path);
    }
  }
}

Names KeyPaths(const nlohmann::json& json) {
  Names out;
  KeyPaths(json, "", out);
  return out;
}

const std::vector<std::string> kStatsKeys = {
    "access_mark_failures",
    "access_marks",
    "access_opens",
    "access_opens_not_held",
    "access_paused",
    "access_pauses",
    "access_rate",
    "attr_refresh_entries",
    "attr_refresh_files",
    "attr_refresh_listings",
    "attrs_after_change",
    "cache_dir",
    "change_events",
    "compressed_entries",
    "consistency",
    "corrupt_entries",
    "daemon_peak_rss_bytes",
    "daemon_rss_bytes",
    "epoch",
    "epoch_accesses",
    "file_table_bytes",
    "files_known",
    "files_untracked",
    "fuse_uring",
    "fuse_uring_requests",
    "identity_invalidations",
    "index_dangling_records",
    "index_rebuilt",
    "inodes",
    "io_uring",
    "isatty",
    "kernel_hole_reads",
    "kernel_page_bytes",
    "kernel_page_drops",
    "kernel_page_entries",
    "metadata_pins",
    "metadata_warmed",
    "metadata_warmup",
    "miss_bytes",
    "misses",
    "mountpoint",
    "not_admitted",
    "open_checks",
    "open_direct_fallbacks",
    "open_drops_deferred",
    "open_file_fd_reopens",
    "open_file_fds",
    "open_file_fds_max",
    "open_relookups",
    "open_sizes_shown",
    "packs",
    "packs_reclaimed",
    "parallel_lookups",
    "passthrough",
    "passthrough_files",
    "passthrough_fills",
    "passthrough_fills_dropped",
    "passthrough_fills_queued",
    "passthrough_opens",
    "passthrough_refused",
    "pattern",
    "pid",
    "plan_entries",
    "plan_fingerprint",
    "plan_position",
    "plans",
    "plans_published",
    "prefetch_already_cached",
    "prefetch_bandwidth_limit",
    "prefetch_budget_wait_ms",
    "prefetch_bytes",
    "prefetch_errors",
    "prefetch_filled",
    "prefetch_from_source",
    "prefetch_from_ssd",
    "prefetch_hits",
    "prefetch_in_kernel",
    "prefetch_iops_limit",
    "prefetch_overtaken",
    "prefetch_pace_reads_per_s",
    "prefetch_pace_slowdowns",
    "prefetch_pacing",
    "prefetch_refused",
    "prefetch_source_depth",
    "prefetch_source_reads",
    "prefetch_threads",
    "prefetched",
    "push_dropped_after",
    "push_errors",
    "push_not_known",
    "push_refused",
    "push_writers_open",
    "pushed_after_passthrough",
    "pushed_at_open",
    "pushed_bytes",
    "pushed_files",
    "pushed_from_stream",
    "ram_budget_bytes",
    "ram_bytes",
    "ram_entries",
    "ram_evictions",
    "ram_hit_bytes",
    "ram_hits",
    "ram_tier_budget_bytes",
    "ram_tier_share_bytes",
    "read_only",
    "read_pages_dropped",
    "read_pages_moved",
    "readahead_gate",
    "readahead_gate_offs",
    "readahead_window",
    "request_errors",
    "requests.create",
    "requests.flush",
    "requests.forget",
    "requests.fsync",
    "requests.fsyncdir",
    "requests.getattr",
    "requests.getxattr",
    "requests.ioctl",
    "requests.link",
    "requests.listxattr",
    "requests.lookup",
    "requests.mkdir",
    "requests.mknod",
    "requests.open",
    "requests.opendir",
    "requests.read",
    "requests.readdir",
    "requests.readdirplus",
    "requests.readlink",
    "requests.release",
    "requests.releasedir",
    "requests.removexattr",
    "requests.rename",
    "requests.rmdir",
    "requests.setattr",
    "requests.setxattr",
    "requests.statfs",
    "requests.symlink",
    "requests.unlink",
    "requests.write",
    "requests_waited",
    "source",
    "source_base_latency_us",
    "source_bytes",
    "source_reads",
    "ssd_budget_bytes",
    "ssd_bytes",
    "ssd_degraded",
    "ssd_degraded_reason",
    "ssd_entries",
    "ssd_evictions",
    "ssd_hit_bytes",
    "ssd_hits",
    "ssd_read_around",
    "ssd_read_buffers",
    "ssd_read_buffers_reused",
    "ssd_stream_bytes",
    "ssd_stream_ios",
    "ssd_streamed",
    "ssd_write_bytes",
    "ssd_write_queue_bytes",
    "ssd_writes",
    "ssd_writes_dropped",
    "stale_entries",
    "uptime_s",
    "version",
    "watch_drops_deferred",
    "watch_drops_forced",
    "watch_failures",
    "watched_dirs",
};

TEST_F(InterfaceTest, StatusJsonKeys) {
  WriteFile(src_ / "a.txt", "hello\n");
  AgeFile(src_ / "a.txt", 3600);
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  ASSERT_EQ(ReadFile(mnt_ / "a.txt"), "hello\n");
  EXPECT_TRUE(SameNames(kStatsKeys, KeyPaths(m.Stats()))) << ".epochfs/stats";

  // `status --json MOUNTPOINT` prints that object; without a mountpoint, an array of
  // them, one per mount (others may belong to other tests: only ours is checked).
  const CommandResult one = Epochfs({"status", "--json", mnt_.string()});
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto one_json = nlohmann::json::parse(one.output);
  EXPECT_TRUE(SameNames(kStatsKeys, KeyPaths(one_json))) << "epochfs status --json MOUNTPOINT";
  const CommandResult all = Epochfs({"status", "--json"});
  ASSERT_EQ(all.exit_code, 0) << all.output;
  const auto all_json = nlohmann::json::parse(all.output);
  ASSERT_TRUE(all_json.is_array()) << all.output;
  const std::string ours = fsys::canonical(mnt_).string();
  auto mine = std::find_if(all_json.begin(), all_json.end(), [&](const nlohmann::json& j) {
    return j.value("mountpoint", "") == ours;
  });
  ASSERT_NE(mine, all_json.end()) << all.output;
  EXPECT_TRUE(SameNames(kStatsKeys, KeyPaths(*mine))) << "epochfs status --json";
}

// The control directory is found by name and never listed, so scans of the mount see
// only the source's files.
TEST_F(InterfaceTest, ControlFiles) {
  WriteFile(src_ / "a.txt", "hello\n");
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  const std::vector<std::string> kControlFiles = {"plan", "stats"};
  for (const std::string& name : kControlFiles) {
    EXPECT_TRUE(fsys::is_regular_file(mnt_ / ".epochfs" / name)) << name;
  }
  Names listed;
  for (const auto& entry : fsys::directory_iterator(mnt_)) {
    listed.insert(entry.path().filename().string());
  }
  EXPECT_TRUE(SameNames({"a.txt"}, listed)) << "the mount's root listing";
}

// ---------------------------------------------------------------------------------
// Prometheus metrics

// "NAME TYPE LABEL,LABEL" for each family: names, types and label names are what
// queries, dashboards and alerts are written against.
const std::vector<std::string> kMetricFamilies = {
    "epochfs_cache_hit_bytes_total counter mountpoint,tier",
    "epochfs_cache_hits_total counter mountpoint,tier",
    "epochfs_change_events_total counter mountpoint",
    "epochfs_compressed_entries gauge mountpoint",
    "epochfs_corrupt_entries_total counter mountpoint",
    "epochfs_daemon_peak_rss_bytes gauge mountpoint",
    "epochfs_daemon_rss_bytes gauge mountpoint",
    "epochfs_evictions_total counter mountpoint,tier",
    "epochfs_fuse_uring_requests_total counter mountpoint",
    "epochfs_info gauge consistency,mountpoint,source,version",
    "epochfs_inodes gauge mountpoint",
    "epochfs_io_uring gauge mountpoint",
    "epochfs_miss_bytes_total counter mountpoint",
    "epochfs_misses_total counter mountpoint",
    "epochfs_not_admitted_total counter mountpoint",
    "epochfs_packs gauge mountpoint",
    "epochfs_packs_reclaimed_total counter mountpoint",
    "epochfs_request_errors_total counter mountpoint",
    "epochfs_requests_total counter kind,mountpoint",
    "epochfs_source_bytes_total counter mountpoint",
    "epochfs_source_reads_total counter mountpoint",
    "epochfs_ssd_degraded gauge mountpoint",
    "epochfs_ssd_write_bytes_total counter mountpoint",
    "epochfs_ssd_writes_dropped_total counter mountpoint",
    "epochfs_ssd_writes_total counter mountpoint",
    "epochfs_stale_entries_total counter mountpoint",
    "epochfs_tier_budget_bytes gauge mountpoint,tier",
    "epochfs_tier_bytes gauge mountpoint,tier",
    "epochfs_tier_entries gauge mountpoint,tier",
    "epochfs_uptime_seconds gauge mountpoint",
    "epochfs_watch_failures_total counter mountpoint",
    "epochfs_watched_dirs gauge mountpoint",
};

// The families of a Prometheus text exposition as "NAME TYPE LABEL,LABEL"; a sample
// without a `# TYPE` line shows as type "untyped".
Names MetricFamilies(const std::string& text) {
  static const std::regex kType(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+))");
  static const std::regex kSample(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? \S+)");
  static const std::regex kLabel(R"(([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*")");
  std::map<std::string, std::string> types;
  std::map<std::string, Names> labels;
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, kType)) {
      types[m[1]] = m[2];
      labels[m[1]];
    } else if (line.rfind("#", 0) != 0 && std::regex_match(line, m, kSample)) {
      Names& family = labels[m[1]];
      const std::string label_text = m[2];
      for (std::sregex_iterator it(label_text.begin(), label_text.end(), kLabel), end; it != end;
           ++it) {
        family.insert((*it)[1]);
      }
    }
  }
  Names out;
  for (const auto& [name, label_names] : labels) {
    std::string labels_joined;
    for (const auto& l : label_names) labels_joined += (labels_joined.empty() ? "" : ",") + l;
    out.insert(name + " " + (types.count(name) ? types[name] : "untyped") + " " + labels_joined);
  }
  return out;
}

TEST_F(InterfaceTest, PrometheusMetricFamilies) {
  const fsys::path textfile = dir_ / "epochfs.prom";
  Mount m(src_, mnt_, cache_, {"--metrics-textfile", textfile.string()});
  ASSERT_TRUE(m.ok()) << m.output();
  // Written once at start, then every 10 s: the first one is enough for the names.
  EXPECT_TRUE(SameNames(kMetricFamilies, MetricFamilies(ReadFile(textfile))))
      << "families in " << textfile;
}

}  // namespace
}  // namespace epochfs::testing
