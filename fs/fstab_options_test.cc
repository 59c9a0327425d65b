#include "fs/fstab_options.h"

#include <gtest/gtest.h>

namespace epochfs::fs {
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

}  // namespace
}  // namespace epochfs::fs
