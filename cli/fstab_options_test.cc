#include "cli/fstab_options.h"

#include <gtest/gtest.h>

namespace epochfs::cli {
namespace {

std::vector<std::string> Translate(const std::vector<std::string>& args) {
  auto inv = ParseHelperArgs(args);
  EXPECT_TRUE(inv.ok()) << inv.status().ToString();
  if (!inv.ok()) return {};
  auto out = TranslateFstabOptions(*inv);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? *out : std::vector<std::string>{};
}

TEST(FstabOptions, TranslatesTheIssueExample) {
  EXPECT_EQ(Translate({"/data/imagenet", "/data/imagenet", "-o",
                       "ram=8G,cache_dir=/nvme/epochfs,_netdev"}),
            (std::vector<std::string>{"mount", "/data/imagenet", "/data/imagenet", "--ram", "8G",
                                      "--cache-dir", "/nvme/epochfs"}));
}

TEST(FstabOptions, PrefetchOptions) {
  EXPECT_EQ(Translate({"/s", "/m", "-o",
                       "prefetch=8,prefetch_iops=250,prefetch_bandwidth=100M,no_prefetch_pacing"}),
            (std::vector<std::string>{"mount", "/s", "/m", "--prefetch", "8", "--prefetch-iops",
                                      "250", "--prefetch-bandwidth", "100M",
                                      "--no-prefetch-pacing"}));
}

TEST(FstabOptions, FlagsValuesAndIgnoredOptions) {
  EXPECT_EQ(
      Translate({"/s", "/m", "-n", "-o",
                 "rw,defaults,noauto,nofail,x-systemd.automount,comment=x,ro,allow_other,"
                 "consistency=open,log_level=debug,attr_timeout=1.5,threads=4,config=/etc/"
                 "epochfs/a.conf"}),
      (std::vector<std::string>{"mount", "/s", "/m", "--read-only", "--allow-other",
                                "--consistency", "open", "--log-level", "debug", "--attr-timeout",
                                "1.5", "--threads", "4", "--config", "/etc/epochfs/a.conf"}));
}

TEST(FstabOptions, ParsesMountHelperFlags) {
  auto inv = ParseHelperArgs({"-sfv", "/s", "/m", "-oram=1G"});
  ASSERT_TRUE(inv.ok());
  EXPECT_TRUE(inv->sloppy);
  EXPECT_TRUE(inv->fake);
  EXPECT_TRUE(inv->verbose);
  EXPECT_EQ(inv->options, std::vector<std::string>{"ram=1G"});
  EXPECT_FALSE(ParseHelperArgs({"/s"}).ok());
  EXPECT_FALSE(ParseHelperArgs({"/s", "/m", "-x"}).ok());
  EXPECT_FALSE(ParseHelperArgs({"/s", "/m", "-o"}).ok());
}

TEST(FstabOptions, RefusesUnknownAndMalformedOptions) {
  auto refuse = [](const std::string& opts) {
    auto inv = ParseHelperArgs({"/s", "/m", "-o", opts});
    EXPECT_TRUE(inv.ok());
    auto out = TranslateFstabOptions(*inv);
    EXPECT_FALSE(out.ok()) << opts;
    return out.ok() ? std::string() : out.status().message();
  };
  EXPECT_NE(refuse("ram=1G,rma=2G").find("unknown option 'rma=2G'"), std::string::npos);
  EXPECT_NE(refuse("ram").find("needs a value"), std::string::npos);
  EXPECT_NE(refuse("ram=").find("empty value"), std::string::npos);
  EXPECT_NE(refuse("allow_other=1").find("takes no value"), std::string::npos);
}

TEST(FstabOptions, SloppyIgnoresUnknownOptions) {
  EXPECT_EQ(Translate({"-s", "/s", "/m", "-o", "bogus,ram=2G"}),
            (std::vector<std::string>{"mount", "/s", "/m", "--ram", "2G"}));
}

// ---- The fstab interface, pinned option by option. Every row below is a promise to
// the fstab lines in use: a change to the option tables (a rename, a merge with the
// config keys) must fail here and be made here on purpose.

// The status of translating `-o <options>` for /s /m, with `sloppy` as -s.
Result<std::vector<std::string>> TranslateOptions(const std::string& options, bool sloppy = false) {
  HelperInvocation inv;
  inv.source = "/s";
  inv.mountpoint = "/m";
  inv.options = {options};
  inv.sloppy = sloppy;
  return TranslateFstabOptions(inv);
}

std::vector<std::string> MountArgs(std::vector<std::string> flags) {
  std::vector<std::string> args = {"mount", "/s", "/m"};
  args.insert(args.end(), flags.begin(), flags.end());
  return args;
}

// Whether `out` is a refusal whose message says `why`.
bool Refused(const Result<std::vector<std::string>>& out, const std::string& why) {
  return !out.ok() && out.status().message().find(why) != std::string::npos;
}

TEST(FstabOptions, EveryValueOptionBecomesItsFlag) {
  const std::vector<std::pair<std::string, std::string>> kValueOptions = {
      {"attr_timeout", "--attr-timeout"},
      {"cache_dir", "--cache-dir"},
      {"chunk_size", "--chunk-size"},
      {"config", "--config"},
      {"consistency", "--consistency"},
      {"disk", "--disk"},
      {"entry_timeout", "--entry-timeout"},
      {"isatty_guard", "--isatty-guard"},
      {"log_file", "--log-file"},
      {"log_level", "--log-level"},
      {"metrics_listen", "--metrics-listen"},
      {"metrics_textfile", "--metrics-textfile"},
      {"prefetch", "--prefetch"},
      {"prefetch_bandwidth", "--prefetch-bandwidth"},
      {"prefetch_iops", "--prefetch-iops"},
      {"ram", "--ram"},
      {"readahead", "--readahead"},
      {"threads", "--threads"},
  };
  for (const auto& [option, flag] : kValueOptions) {
    // The value is handed on untouched: `epochfs mount` checks it.
    auto out = TranslateOptions(option + "=x/y:1.5");
    ASSERT_TRUE(out.ok()) << option << ": " << out.status().ToString();
    EXPECT_EQ(*out, MountArgs({flag, "x/y:1.5"})) << option;
    EXPECT_TRUE(Refused(TranslateOptions(option), "needs a value")) << option;
    EXPECT_TRUE(Refused(TranslateOptions(option + "="), "empty value")) << option;
  }
}

TEST(FstabOptions, EveryBareOptionBecomesItsFlag) {
  const std::vector<std::pair<std::string, std::string>> kBareOptions = {
      {"allow_other", "--allow-other"}, {"metrics_allow_remote", "--metrics-allow-remote"},
      {"no_io_uring", "--no-io-uring"}, {"no_prefetch_pacing", "--no-prefetch-pacing"},
      {"no_page_cache_push", "--no-page-cache-push"}, {"passthrough", "--passthrough"},
      {"read_only", "--read-only"},     {"ro", "--read-only"},
  };
  for (const auto& [option, flag] : kBareOptions) {
    auto out = TranslateOptions(option);
    ASSERT_TRUE(out.ok()) << option << ": " << out.status().ToString();
    EXPECT_EQ(*out, MountArgs({flag})) << option;
    EXPECT_TRUE(Refused(TranslateOptions(option + "=1"), "takes no value")) << option;
  }
}

TEST(FstabOptions, EveryOptionForMountAndSystemdIsIgnored) {
  const std::vector<std::string> kIgnoredOptions = {
      "_netdev",   "async",  "atime", "auto",     "comment",
      "defaults",  "dev",    "exec",  "group",    "loud",
      "noatime",   "noauto", "nodev", "noexec",   "nofail",
      "nosuid",    "nouser", "owner", "relatime", "rw",
      "silent",    "suid",   "user",  "users",    "x-systemd.automount",
      "x-anything"};
  for (const std::string& option : kIgnoredOptions) {
    for (const std::string& written : {option, option + "=value"}) {
      auto out = TranslateOptions(written);
      ASSERT_TRUE(out.ok()) << written << ": " << out.status().ToString();
      EXPECT_EQ(*out, MountArgs({})) << written;
    }
  }
}

// Config keys and `epochfs mount` flags that fstab does not take: one option table for
// all three surfaces must not quietly add them to fstab.
TEST(FstabOptions, ConfigKeysAndFlagsThatAreNoFstabOptionsAreRefused) {
  const std::vector<std::string> kNotFstabOptions = {
      "config_if_exists", "foreground", "io_uring", "mountpoint", "prefetch_pacing",
      "page_cache_push", "source"};
  for (const std::string& option : kNotFstabOptions) {
    for (const std::string& written : {option, option + "=1"}) {
      EXPECT_TRUE(Refused(TranslateOptions(written), "unknown option '" + written + "'"))
          << written;
      auto sloppy = TranslateOptions(written, /*sloppy=*/true);
      ASSERT_TRUE(sloppy.ok()) << written << ": " << sloppy.status().ToString();
      EXPECT_EQ(*sloppy, MountArgs({})) << written;
    }
  }
}

}  // namespace
}  // namespace epochfs::cli
