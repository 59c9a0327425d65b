#include "cli/top.h"

#include <gtest/gtest.h>

namespace epochfs::cli {
namespace {

TEST(Top, FrameShowsRatesRatiosTiersAndPattern) {
  auto before = nlohmann::json::parse(R"({"mountpoint": "/m", "source": "/s", "ram_hits": 0,
    "ssd_hits": 0, "misses": 10, "miss_bytes": 1000000, "source_reads": 10,
    "source_bytes": 1000000, "consistency": "notify"})");
  auto after = before;
  after["ram_hits"] = 30;
  after["ssd_hits"] = 10;
  after["ram_hit_bytes"] = 4000000;
  after["ram_bytes"] = 512 << 20;
  after["ram_budget_bytes"] = 1024 << 20;
  before["requests"] = {{"lookup", 10}, {"read", 0}};
  after["requests"] = {{"lookup", 14}, {"read", 40}, {"open", 0}};
  const std::string frame = TopFrame(before, after, 2.0);
  EXPECT_NE(frame.find("(read 20/s, lookup 2/s)"), std::string::npos) << frame;
  EXPECT_EQ(frame.find("epoch pattern"), std::string::npos) << "no pattern reported\n" << frame;
  // 40 reads in 2 s, 50 since mount; 30 of the 40 from RAM, 30 of the 50 since mount.
  EXPECT_NE(frame.find("20/s (50), RAM hits 75.0% (60.0%)"), std::string::npos) << frame;
  EXPECT_NE(frame.find("512.0 MiB of 1.0 GiB (50.0%)"), std::string::npos) << frame;
  EXPECT_NE(frame.find("notify"), std::string::npos);
  after["pattern"] = "shuffled, 1 pass per epoch";
  EXPECT_NE(TopFrame(before, after, 2.0).find("epoch pattern     shuffled, 1 pass per epoch"),
            std::string::npos);
}

TEST(Top, RunTopOnceDrawsOneFrameAndStopsWhenTheMountGoes) {
  int calls = 0;
  auto read = [&]() -> Result<nlohmann::json> {
    calls++;
    return nlohmann::json{{"ram_hits", calls * 10}, {"mountpoint", "/m"}};
  };
  FILE* out = std::tmpfile();
  EXPECT_EQ(RunTop({0.05, true}, read, out), 0);
  EXPECT_EQ(calls, 2);
  auto gone = []() -> Result<nlohmann::json> { return Status::NotFound("gone"); };
  EXPECT_NE(RunTop({0.05, false}, gone, out), 0);
  std::fclose(out);
}

}  // namespace
}  // namespace epochfs::cli
