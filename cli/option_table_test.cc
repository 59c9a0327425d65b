// The option table against the surfaces built from it: every row works on each surface
// it names, the surfaces agree on what a value means, and the documentation keeps up.
#include "cli/option_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "CLI/CLI.hpp"
#include "cli/config.h"
#include "cli/fstab_options.h"
#include "cli/mount_flags.h"
#include "fmt/format.h"

namespace epochfs::cli {

using daemon::MountOptions;
namespace {

// Every field of MountOptions, so two of them can be compared in one EXPECT_EQ.
std::string Describe(const MountOptions& o) {
  return fmt::format(
      "source={} mountpoint={} cache_dir={} log_file={} ram={} disk={} disk_set={} chunk={} "
      "foreground={} read_only={} allow_other={} io_uring={} log_level={} attr={} entry={} "
      "threads={} consistency={} readahead={} prefetch={} iops={} bandwidth={} pacing={} "
      "push={} passthrough={} fuse_uring={} isatty_guard={} listen={} remote={} textfile={}",
      o.source.string(), o.mountpoint.string(), o.cache_dir.string(), o.log_file.string(),
      o.ram_budget, o.disk_budget, o.disk_budget_set, o.chunk_size, o.foreground, o.read_only,
      o.allow_other, o.use_io_uring, o.log_level, o.timeouts.attr_s, o.timeouts.entry_s,
      o.max_threads, daemon::ConsistencyName(o.consistency), o.readahead, o.prefetch_threads,
      o.prefetch_iops, o.prefetch_bandwidth, o.prefetch_pacing, o.page_cache_push, o.passthrough, o.fuse_uring,
      o.isatty_guard, o.metrics_listen,
      o.metrics_allow_remote, o.metrics_textfile.string());
}

// A valid value for `row` other than its default, as the command line writes it.
std::string SampleText(const OptionRow& row) {
  switch (row.type) {
    case OptionType::kBool:
      return "";
    case OptionType::kSize:
      return "8M";  // within every size row's range (--ram needs 4M)
    case OptionType::kInteger:
      return std::to_string(row.min + 2);
    case OptionType::kSeconds:
      return "2.5";
    case OptionType::kPath:
      return "/x/y";
    case OptionType::kOneOf:
      return row.choices[1];
    case OptionType::kHostPort:
      return "127.0.0.1:9464";
  }
  return "";
}

// The same value as a TOML value.
std::string SampleToml(const OptionRow& row) {
  switch (row.type) {
    case OptionType::kBool:
      return row.flag_turns_off ? "false" : "true";  // what the flag sets
    case OptionType::kInteger:
    case OptionType::kSeconds:
      return SampleText(row);
    default:
      return "\"" + SampleText(row) + "\"";
  }
}

// `args` parsed as `epochfs mount` flags and applied over `options`.
Status ParseFlags(const std::vector<std::string>& args, MountOptions& options) {
  CLI::App app;
  MountFlags flags(&app);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops the back
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return Status::InvalidArgument(e.what());
  }
  return flags.ApplyGiven(options);
}

// The command-line arguments that give `row` its sample value.
std::vector<std::string> SampleArgs(const OptionRow& row) {
  std::vector<std::string> args;
  if (row.flag[0] == '-') args.push_back(LongFlag(row));
  if (row.type != OptionType::kBool) args.push_back(SampleText(row));
  return args;
}

TEST(OptionTable, RowsAreWellFormed) {
  std::set<std::string> flags, toml_keys, fstab_keys;
  for (const OptionRow& row : MountOptionTable()) {
    EXPECT_FALSE(row.flag.empty() && row.toml_key.empty() && row.fstab_keys.empty())
        << "a row on no surface";
    EXPECT_FALSE(row.help.empty() && !row.flag.empty()) << row.flag << ": no help text";
    if (!row.flag.empty()) {
      EXPECT_TRUE(flags.insert(row.flag).second) << row.flag;
    }
    if (!row.toml_key.empty()) {
      EXPECT_TRUE(toml_keys.insert(row.toml_key).second) << row.toml_key;
      EXPECT_NE(row.apply, nullptr) << row.toml_key;  // a value read must land somewhere
    }
    for (const auto& key : row.fstab_keys) EXPECT_TRUE(fstab_keys.insert(key).second) << key;
    // The fstab helper hands values on as flags: every fstab option needs one.
    EXPECT_TRUE(row.fstab_keys.empty() || !row.flag.empty()) << row.fstab_keys[0];
    EXPECT_TRUE(row.type != OptionType::kOneOf || row.choices.size() >= 2) << row.flag;
  }
}

TEST(OptionTable, TheConfigLoaderAcceptsEveryKey) {
  for (const OptionRow& row : MountOptionTable()) {
    if (row.toml_key.empty()) continue;
    MountOptions options;
    std::set<std::string> keys;
    const std::string text = row.toml_key + " = " + SampleToml(row) + "\n";
    Status st = ApplyConfigText(text, "x.conf", options, &keys);
    ASSERT_TRUE(st.ok()) << text << st.ToString();
    EXPECT_EQ(keys, std::set<std::string>{row.toml_key});
    EXPECT_NE(Describe(options), Describe(MountOptions())) << text << "changed nothing";
  }
}

TEST(OptionTable, AFlagAndItsConfigKeyMeanTheSame) {
  for (const OptionRow& row : MountOptionTable()) {
    if (row.flag.empty() || row.toml_key.empty()) continue;
    MountOptions from_file, from_flag;
    std::string text = row.toml_key + " = " + SampleToml(row) + "\n";
    std::vector<std::string> args = SampleArgs(row);
    if (row.flag == "MOUNTPOINT") {  // the second positional needs the first
      text += "source = \"/s\"\n";
      args.insert(args.begin(), "/s");
    }
    ASSERT_TRUE(ApplyConfigText(text, "x.conf", from_file, nullptr).ok()) << text;
    Status st = ParseFlags(args, from_flag);
    ASSERT_TRUE(st.ok()) << row.flag << ": " << st.ToString();
    EXPECT_EQ(Describe(from_flag), Describe(from_file)) << row.flag;
  }
}

TEST(OptionTable, TheDefaultsInHelpAreTheRealDefaults) {
  std::vector<std::string> args;
  for (const OptionRow& row : MountOptionTable()) {
    if (row.help_default.empty()) continue;
    args.push_back(LongFlag(row));
    args.push_back(row.help_default);
  }
  MountOptions options;
  ASSERT_TRUE(ParseFlags(args, options).ok());
  EXPECT_EQ(Describe(options), Describe(MountOptions()));
}

TEST(OptionTable, FlagsGivenOverrideTheFileAndOnlyThem) {
  MountOptions options;
  ASSERT_TRUE(ApplyConfigText("source = \"/data\"\nram = \"8G\"\nread_only = true\n"
                              "io_uring = false\nthreads = 4\n",
                              "x.conf", options, nullptr)
                  .ok());
  ASSERT_TRUE(ParseFlags({"/other", "--ram", "2G", "--threads", "8"}, options).ok());
  EXPECT_EQ(options.source, "/other");
  EXPECT_EQ(options.ram_budget, 2ull << 30);
  EXPECT_EQ(options.max_threads, 8u);
  EXPECT_TRUE(options.read_only);       // the file's, no flag given
  EXPECT_FALSE(options.use_io_uring);   // likewise
  EXPECT_EQ(options.chunk_size, MountOptions().chunk_size);  // neither: the default
}

TEST(OptionTable, ABadSizeFlagNamesTheFlag) {
  MountOptions options;
  Status st = ParseFlags({"--chunk-size", "1Q"}, options);
  EXPECT_EQ(st.message().rfind("--chunk-size: invalid size '1Q'", 0), 0u) << st.message();
}

TEST(OptionTable, EveryFstabOptionBecomesItsFlag) {
  for (const OptionRow& row : MountOptionTable()) {
    for (const std::string& key : row.fstab_keys) {
      HelperInvocation inv;
      inv.source = "/s";
      inv.mountpoint = "/m";
      const bool bare = row.type == OptionType::kBool;
      inv.options = {bare ? key : key + "=v"};
      auto out = TranslateFstabOptions(inv);
      ASSERT_TRUE(out.ok()) << key << ": " << out.status().ToString();
      std::vector<std::string> want = {"mount", "/s", "/m", LongFlag(row)};
      if (!bare) want.push_back("v");
      EXPECT_EQ(*out, want) << key;
    }
  }
}

TEST(OptionTable, TheUnknownFstabOptionErrorListsEveryOption) {
  HelperInvocation inv;
  inv.source = "/s";
  inv.mountpoint = "/m";
  inv.options = {"bogus"};
  auto out = TranslateFstabOptions(inv);
  ASSERT_FALSE(out.ok());
  const std::string& message = out.status().message();
  for (const OptionRow& row : MountOptionTable()) {
    for (const std::string& key : row.fstab_keys) {
      const std::string written = row.type == OptionType::kBool ? key : key + "=";
      EXPECT_TRUE(std::regex_search(message, std::regex("[ (]" + written + "[,)]")))
          << written << " missing from: " << message;
    }
  }
}

// systemd/epochfs.conf.example promises to list every key (commented out).
TEST(OptionTable, TheExampleConfigNamesEveryKey) {
  std::ifstream in(EPOCHFS_CONFIG_EXAMPLE);
  ASSERT_TRUE(in) << EPOCHFS_CONFIG_EXAMPLE;
  std::stringstream text;
  text << in.rdbuf();
  for (const std::string& key : ConfigKeys()) {
    EXPECT_TRUE(std::regex_search(text.str(), std::regex("(^|\n)# " + key + " = ")))
        << "no \"# " << key << " = ...\" line in " << EPOCHFS_CONFIG_EXAMPLE;
  }
}

}  // namespace
}  // namespace epochfs::cli
