// Writes through the mount racing readahead's pushes into the kernel's page cache.
//
// The kernel copies a buffered write into the file's page-cache pages, unlocks the full
// pages, and only then queues the WRITE, whose payload is copied out of those same pages
// when the daemon reads the request (fs/fuse/file.c, fuse_fill_write_pages and
// fuse_send_write_pages). A store (fuse_lowlevel_notify_store) landing in that gap puts
// old bytes over the new ones, and the WRITE then carries the old bytes to the source:
// an acknowledged write is lost. kernel_cache/page_cache_pusher.h says how pushes are kept out of
// files open for writing.
//
// Several writer threads rewrite small files through the mount, as sixteen 4 KiB pwrites
// or one 64 KiB pwrite, resting a little between rewrites (long enough for readahead to
// read each file again and push it), while the test republishes a plan naming every file
// every 30 ms, so that readahead keeps reading and pushing them. After each write
// returns, the writer reads the file back through the mount (a fresh open) and reads the
// source directly: both must hold exactly what it wrote.
//
// The race is narrow (how narrow: docs/benchmarks.md, "Figures behind design choices"),
// so the run is long: EPOCHFS_WRITE_RACE_SECONDS per mode (default 20;
// bench/write_race.sh runs it longer).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount_fixture.h"

namespace epochfs::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kWriters = 6;
constexpr int kFilesPerWriter = 12;
constexpr size_t kFileSize = 64 * 1024;
constexpr size_t kPage = 4096;
constexpr auto kRestBetweenWrites = std::chrono::milliseconds(4);
constexpr auto kPlanEvery = std::chrono::milliseconds(30);

std::chrono::seconds RunFor() {
  const char* env = std::getenv("EPOCHFS_WRITE_RACE_SECONDS");
  const long seconds = env ? std::strtol(env, nullptr, 10) : 20;
  return std::chrono::seconds(seconds > 0 ? seconds : 20);
}

std::string FileName(int writer, int file) {
  return "hot/w" + std::to_string(writer) + "_" + std::to_string(file) + ".bin";
}

// Version `version` of a file: every 8-byte word names the file, the version and its
// index, so a read-back that is off tells which version it holds.
std::string Content(int writer, int file, uint64_t version) {
  std::string out(kFileSize, '\0');
  const uint64_t id = static_cast<uint64_t>(writer * kFilesPerWriter + file + 1);
  for (size_t word = 0; word < kFileSize / 8; word++) {
    const uint64_t tag = id << 48 | (version & 0xffffff) << 24 | word;
    std::memcpy(out.data() + word * 8, &tag, 8);
  }
  return out;
}

// The version a file's bytes hold (the first word's), or -1.
int64_t VersionOf(const std::string& bytes) {
  if (bytes.size() < 8) return -1;
  uint64_t tag;
  std::memcpy(&tag, bytes.data(), 8);
  return static_cast<int64_t>((tag >> 24) & 0xffffff);
}

struct Tally {
  std::mutex mu;
  uint64_t writes = 0, lost = 0, wrong_read_back = 0;
  std::vector<std::string> first;
  void Note(const std::string& what) {
    if (first.size() < 6) first.push_back(what);
  }
};

class WriteRaceTest : public ConsistencyModeTest {
 protected:
  void Writer(int writer, Clock::time_point end, Tally& tally) {
    std::vector<uint64_t> versions(kFilesPerWriter, 0);
    uint64_t writes = 0;
    for (int file = 0; Clock::now() < end; file = (file + 1) % kFilesPerWriter) {
      const std::string name = FileName(writer, file);
      const uint64_t version = ++versions[file];
      const std::string data = Content(writer, file, version);
      const int fd = ::open((mnt_ / name).c_str(), O_WRONLY);
      ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
      size_t written = 0;
      if (version % 2 == 0) {
        written = static_cast<size_t>(::pwrite(fd, data.data(), data.size(), 0));
      } else {
        for (size_t off = 0; off < data.size(); off += kPage) {
          written += static_cast<size_t>(::pwrite(fd, data.data() + off, kPage, off));
        }
      }
      ::close(fd);
      ASSERT_EQ(written, kFileSize) << name;
      writes++;
      const std::string through_mount = ReadWhole(mnt_ / name);
      const std::string in_source = ReadWhole(src_ / name);
      if (in_source != data || through_mount != data) {
        std::lock_guard lock(tally.mu);
        if (in_source != data) tally.lost++;
        if (through_mount != data) tally.wrong_read_back++;
        tally.Note(name + " version " + std::to_string(version) + ": the source holds version " +
                   std::to_string(VersionOf(in_source)) + ", the mount reads version " +
                   std::to_string(VersionOf(through_mount)));
      }
      std::this_thread::sleep_for(kRestBetweenWrites);
    }
    std::lock_guard lock(tally.mu);
    tally.writes += writes;
  }
};

// Every acknowledged write reaches the source, and reading it back through the mount
// gives exactly its bytes, while readahead pushes the same files again and again.
TEST_P(WriteRaceTest, AcknowledgedWritesRacingPushesAreNeverLost) {
  fsys::create_directories(src_ / "hot");
  std::vector<std::string> names;
  for (int w = 0; w < kWriters; w++) {
    for (int f = 0; f < kFilesPerWriter; f++) {
      names.push_back(FileName(w, f));
      WriteFile(src_ / names.back(), Content(w, f, 0));
      AgeFile(src_ / names.back(), 3600);
    }
  }
  auto m = MountIt({"--ram", "256M"});
  ASSERT_TRUE(m->ok());
  // A LOOKUP of each: pushes need the kernel to know the inode.
  for (const auto& name : names) ASSERT_TRUE(fsys::exists(mnt_ / name)) << name;
  std::string plan = "epochfs-plan 1\n";
  for (const auto& name : names) plan += name + "\n";
  plan += "\n";

  Tally tally;
  const auto end = Clock::now() + RunFor();
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; w++) {
    writers.emplace_back([&, w] { Writer(w, end, tally); });
  }
  uint64_t plans = 0;
  while (Clock::now() < end) {
    if (WritePlan(mnt_, plan) == 0) plans++;
    std::this_thread::sleep_for(kPlanEvery);
  }
  for (auto& t : writers) t.join();

  const auto stats = m->Stats();
  std::cout << GetParam() << ": " << tally.writes << " acknowledged writes, " << tally.lost
            << " lost, " << tally.wrong_read_back << " read back wrong; " << plans
            << " plans, " << stats["pushed_files"] << " files pushed, "
            << stats["push_writers_open"] << " pushes or drops put off for a writer\n";
  std::string first;
  for (const auto& f : tally.first) first += "\n  " + f;
  EXPECT_EQ(tally.lost, 0u) << "of " << tally.writes << " writes" << first;
  EXPECT_EQ(tally.wrong_read_back, 0u) << "of " << tally.writes << " writes" << first;
  EXPECT_GT(tally.writes, 1000u);
  EXPECT_GT(plans, 10u);
  // The race was there to be lost: readahead did push these files between writes.
  EXPECT_GT(stats["pushed_files"].get<uint64_t>(), 500u) << stats.dump();
}

INSTANTIATE_TEST_SUITE_P(Modes, WriteRaceTest, ::testing::Values("notify", "open"));

}  // namespace
}  // namespace epochfs::testing
