// `epochfs run`: an unmodified torchvision DatasetFolder + DataLoader script publishes
// each epoch's order (loader/python/epochfs/hook.py). The script (run_hook_client.py)
// reads every sample of every epoch through the mount; the test compares what it read,
// and what the mount was told, with and without the wrapper.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "tests/mount_fixture.h"

namespace epochfs::testing {
namespace {

const std::string kClient = std::string(EPOCHFS_SOURCE_DIR) + "/tests/run_hook_client.py";

bool HaveTorchvision() {
  return Run({"/usr/bin/python3", "-c", "import torch, torchvision"}).exit_code == 0;
}

// The fingerprint the mount reports for a plan of `paths` (PrefetcherStats).
std::string Fingerprint(const std::vector<std::string>& paths) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (const std::string& p : paths) {
    XXH3_64bits_update(state, p.data(), p.size());
    XXH3_64bits_update(state, "\n", 1);
  }
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return fmt::format("{:016x}", digest);
}

class RunHookTest : public MountedDirsTest {
 protected:
  void SetUp() override {
    MountedDirsTest::SetUp();
    if (IsSkipped()) return;
    if (!HaveTorchvision()) GTEST_SKIP() << "needs python3-torch and python3-torchvision";
    for (int i = 0; i < 30; ++i) {
      const fsys::path file = src_ / "train" / ("c" + std::to_string(i % 3)) /
                              ("f" + std::to_string(i) + ".bin");
      fsys::create_directories(file.parent_path());
      WriteFile(file, RandomBytes(2000 + 97 * i, i));
      AgeFile(file, 3600);
    }
  }

  // The client's per-epoch report; `wrapped`: under `epochfs run`; `env`: a command
  // that runs it with an environment of its own (env(1)).
  nlohmann::json RunClient(bool wrapped, int workers, const std::string& extra = "",
                           const std::vector<std::string>& env = {}) {
    std::vector<std::string> args = {"/usr/bin/python3", kClient, mnt_.string(), src_.string(),
                                     std::to_string(workers), "7", "2"};
    if (!extra.empty()) args.push_back(extra);
    if (wrapped) args.insert(args.begin(), {EPOCHFS_BINARY, "run", "--"});
    args.insert(args.begin(), env.begin(), env.end());
    last_ = epochfs::testing::Run(args);
    EXPECT_EQ(last_.exit_code, 0) << last_.output;
    const size_t json = last_.output.find('[');
    if (json == std::string::npos) return nlohmann::json::array();
    return nlohmann::json::parse(last_.output.substr(json), nullptr, /*allow_exceptions=*/false);
  }

  CommandResult last_;
};

// Every sample once per epoch, byte-identical, in the sampler's order, with and without
// the wrapper, with 0 and 2 workers; with it, each epoch's plan is published before the
// epoch's reads, its fingerprint is the sampler's order, and the client's buffered
// opens send no isatty() ioctl.
TEST_F(RunHookTest, DataLoaderReadsTheSameAndPublishesTheSamplersOrder) {
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  uint64_t published = 0;
  for (int workers : {0, 2}) {
    for (bool wrapped : {false, true}) {
      SCOPED_TRACE(fmt::format("workers {}, {}", workers, wrapped ? "epochfs run" : "plain"));
      const nlohmann::json epochs = RunClient(wrapped, workers);
      ASSERT_EQ(epochs.size(), 2u) << last_.output;
      for (const auto& e : epochs) {
        const auto expected = e["expected"].get<std::vector<std::string>>();
        const auto read = e["read"].get<std::vector<std::string>>();
        EXPECT_EQ(read, expected);  // the sampler's order, exactly
        EXPECT_EQ(std::set<std::string>(read.begin(), read.end()).size(), 30u);
        EXPECT_TRUE(e["bytes_match"].get<bool>());
        if (wrapped) {
          ++published;
          EXPECT_EQ(e["plans_published"].get<uint64_t>(), published);
          EXPECT_EQ(e["plan_fingerprint"].get<std::string>(), Fingerprint(expected));
          // The buffered opens skip isatty(): not one ioctl reaches the daemon.
          EXPECT_EQ(e["ioctls"].get<uint64_t>(), 0u);
        } else {
          EXPECT_EQ(e["plans_published"].get<uint64_t>(), published);  // nothing new
          EXPECT_GE(e["ioctls"].get<uint64_t>(), 30u);  // one per buffered open
        }
      }
    }
  }
}

// DistributedSampler's next order is known (a generator seeded with seed + epoch): each
// epoch's plan is this epoch's shard, then the next one's, so the mount can fetch the
// next shard during this epoch. What is read stays exactly the sampler's order. A script
// that never calls set_epoch() reads the same order each epoch: from its second epoch
// on, that is what is predicted.
TEST_F(RunHookTest, DistributedSamplerPublishesThisEpochsShardThenTheNext) {
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  for (int workers : {0, 2}) {
    SCOPED_TRACE(fmt::format("workers {}", workers));
    const nlohmann::json epochs = RunClient(/*wrapped=*/true, workers, "distributed");
    ASSERT_EQ(epochs.size(), 2u) << last_.output;
    for (const auto& e : epochs) {
      auto expected = e["expected"].get<std::vector<std::string>>();
      const auto next = e["next_expected"].get<std::vector<std::string>>();
      EXPECT_EQ(e["read"].get<std::vector<std::string>>(), expected);
      EXPECT_EQ(expected.size(), 15u);  // rank 1 of 2
      EXPECT_TRUE(e["bytes_match"].get<bool>());
      EXPECT_NE(expected, next);
      expected.insert(expected.end(), next.begin(), next.end());
      EXPECT_EQ(e["plan_fingerprint"].get<std::string>(), Fingerprint(expected));
    }
  }
  const nlohmann::json fixed = RunClient(/*wrapped=*/true, 0, "distributed-fixed");
  ASSERT_EQ(fixed.size(), 2u) << last_.output;
  auto order = fixed[1]["expected"].get<std::vector<std::string>>();
  EXPECT_EQ(fixed[1]["read"].get<std::vector<std::string>>(), order);
  EXPECT_EQ(fixed[0]["expected"], fixed[1]["expected"]);
  EXPECT_EQ(fixed[1]["plans"].get<uint64_t>(), 1u) << last_.output;
  const std::vector<std::string> again = order;
  order.insert(order.end(), again.begin(), again.end());
  EXPECT_EQ(fixed[1]["plan_fingerprint"].get<std::string>(), Fingerprint(order));
}

// A data set that does not say where its samples are is left alone: the same reads, no
// plan, one warning.
TEST_F(RunHookTest, AnUnmappableDatasetIsLeftAloneWithOneWarning) {
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  const nlohmann::json epochs = RunClient(/*wrapped=*/true, 0, "unmapped");
  ASSERT_EQ(epochs.size(), 2u) << last_.output;
  for (const auto& e : epochs) {
    EXPECT_EQ(e["read"], e["expected"]);
    EXPECT_EQ(e["plans_published"].get<uint64_t>(), 0u);
  }
  const std::string warning = "does not say where its samples are";
  const size_t first = last_.output.find(warning);
  EXPECT_NE(first, std::string::npos) << last_.output;
  EXPECT_EQ(last_.output.find(warning, first + 1), std::string::npos) << last_.output;
}

// A script started plainly (a notebook, a scheduler's fixed entry point) gets what
// `epochfs run` gives once `epochfs python-hook enable` has put its .pth into a
// site-packages folder of the interpreter: here the user's, under a PYTHONUSERBASE of
// the test's own. Python reads a user's .pth before the system's site-packages are on
// its path, so the .pth loads the hook by its absolute path (here the build tree's,
// with no PYTHONPATH at all). Disabled, the script is back to one ioctl per buffered
// open and no plan.
TEST_F(RunHookTest, ThePythonHookReachesAScriptStartedWithoutEpochfsRun) {
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  const std::vector<std::string> env = {"/usr/bin/env", "-u", "PYTHONPATH",
                                        "PYTHONUSERBASE=" + (dir_ / "userbase").string()};
  auto hook = [&](const std::string& action) {
    std::vector<std::string> args = env;
    args.insert(args.end(), {EPOCHFS_BINARY, "python-hook", action, "--user", "--python",
                             "/usr/bin/python3"});
    return epochfs::testing::Run(args);
  };
  const CommandResult before = hook("status");
  EXPECT_EQ(before.exit_code, 0) << before.output;
  EXPECT_NE(before.output.find("starts with the hook: no"), std::string::npos) << before.output;
  const CommandResult enable = hook("enable");
  ASSERT_EQ(enable.exit_code, 0) << enable.output;
  EXPECT_NE(enable.output.find("starts with the hook: yes"), std::string::npos) << enable.output;

  uint64_t published = 0;
  nlohmann::json epochs = RunClient(/*wrapped=*/false, 2, "", env);
  ASSERT_EQ(epochs.size(), 2u) << last_.output;
  for (const auto& e : epochs) {
    const auto expected = e["expected"].get<std::vector<std::string>>();
    EXPECT_EQ(e["read"].get<std::vector<std::string>>(), expected);
    EXPECT_TRUE(e["bytes_match"].get<bool>());
    EXPECT_EQ(e["plans_published"].get<uint64_t>(), ++published);
    EXPECT_EQ(e["plan_fingerprint"].get<std::string>(), Fingerprint(expected));
    EXPECT_EQ(e["ioctls"].get<uint64_t>(), 0u);
  }

  const CommandResult disable = hook("disable");
  EXPECT_EQ(disable.exit_code, 0) << disable.output;
  EXPECT_NE(disable.output.find("starts with the hook: no"), std::string::npos) << disable.output;
  epochs = RunClient(/*wrapped=*/false, 2, "", env);
  ASSERT_EQ(epochs.size(), 2u) << last_.output;
  for (const auto& e : epochs) {
    EXPECT_EQ(e["read"], e["expected"]);
    EXPECT_EQ(e["plans_published"].get<uint64_t>(), published);  // nothing new
    EXPECT_GE(e["ioctls"].get<uint64_t>(), 30u);                 // one per buffered open
  }
}

// `python-hook` refuses what it cannot do, with the reason.
TEST(PythonHookCommand, BadActionsAndInterpretersAreRefusedClearly) {
  const CommandResult bad = epochfs::testing::Run({EPOCHFS_BINARY, "python-hook", "enabel"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("enabel not in {enable,disable,status}"), std::string::npos) << bad.output;
  const CommandResult both = epochfs::testing::Run(
      {EPOCHFS_BINARY, "python-hook", "status", "--user", "--dir", "/tmp"});
  EXPECT_EQ(both.exit_code, 2) << both.output;
  const CommandResult missing = epochfs::testing::Run(
      {EPOCHFS_BINARY, "python-hook", "status", "--python", "/nonexistent/python3"});
  EXPECT_EQ(missing.exit_code, 127) << missing.output;
  EXPECT_NE(missing.output.find("cannot run /nonexistent/python3"), std::string::npos)
      << missing.output;
  // A folder it may not write: the error names the file and says why.
  const CommandResult readonly = epochfs::testing::Run(
      {EPOCHFS_BINARY, "python-hook", "enable", "--dir", "/proc/epochfs-no-such-dir",
       "--python", "/usr/bin/python3"});
  EXPECT_EQ(readonly.exit_code, 1) << readonly.output;
  EXPECT_NE(readonly.output.find("cannot write /proc/epochfs-no-such-dir/epochfs-autohook.pth"),
            std::string::npos)
      << readonly.output;
}

// A command that cannot be started: env(1)'s exit codes, and a clear message.
TEST(RunCommand, AMissingCommandExits127) {
  const CommandResult r = epochfs::testing::Run({EPOCHFS_BINARY, "run", "--", "/nonexistent/train"});
  EXPECT_EQ(r.exit_code, 127) << r.output;
  EXPECT_NE(r.output.find("cannot run /nonexistent/train"), std::string::npos) << r.output;
  const CommandResult none = epochfs::testing::Run({EPOCHFS_BINARY, "run"});
  EXPECT_EQ(none.exit_code, 2) << none.output;
}

// COMMAND's arguments reach it verbatim and in order: its own options, and a `--` of its
// own, with or without the `--` that ends epochfs's (CLI11 once moved a leading `--` to
// the end and reordered `-x` options: a training script got "--" as an argument).
TEST(RunCommand, PassesTheCommandsArgumentsVerbatim) {
  const std::vector<std::string> command = {"/bin/sh", "-c", "printf '%s|' \"$@\"", "sh",
                                            "--root", "x", "-h", "--", "--b", "c"};
  for (const bool dashes : {true, false}) {
    std::vector<std::string> args = {EPOCHFS_BINARY, "run"};
    if (dashes) args.push_back("--");
    args.insert(args.end(), command.begin(), command.end());
    const CommandResult r = epochfs::testing::Run(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output, "--root|x|-h|--|--b|c|") << "with -- " << dashes;
  }
}

}  // namespace
}  // namespace epochfs::testing
