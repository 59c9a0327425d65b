// Readahead that does not pay costs nothing: on a source that serves at a fixed rate (an
// ext4 image on a loop device whose read IOPS a cgroup-v1 blkio throttle caps), the
// first epoch through epochfs, with the order published or not, is no slower than the
// same readers reading the source directly. A regression guard, not a benchmark: the
// tolerance is 10% (kTolerance), and a row that falls short is measured once more
// before it fails (a shared machine has moments). Skips where the blkio controller,
// loop devices or mkfs.ext4 are missing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount_fixture.h"

namespace epochfs::testing {
namespace {

constexpr int kFiles = 1000;
constexpr size_t kFileSize = 32 * 1024;  // one IO each
constexpr int kIops = 500;               // the source's capacity
constexpr int kReaders = 4;
constexpr double kTolerance = 0.9;
const fsys::path kBlkio = "/sys/fs/cgroup/blkio";

bool WriteText(const fsys::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

// An ext4 image on a loop device mounted at `mountpoint`, its reads capped at kIops for
// a blkio cgroup that this process (and so every process it starts: the daemons, the
// readers) joins. Everything is undone when it goes.
class ThrottledSource {
 public:
  ThrottledSource(const fsys::path& dir, const fsys::path& mountpoint) : mountpoint_(mountpoint) {
    if (!fsys::exists(kBlkio / "cgroup.procs")) {
      why_not_ = "no cgroup-v1 blkio controller";
      return;
    }
    image_ = dir / "source.img";
    {
      std::ofstream(image_).close();
      fsys::resize_file(image_, 192ull << 20);
    }
    CommandResult r = Run({"mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", "-E",
                           "lazy_itable_init=0,lazy_journal_init=0", image_.string()});
    if (r.exit_code != 0) {
      why_not_ = "mkfs.ext4: " + r.output;
      return;
    }
    r = Run({"losetup", "--find", "--show", "--direct-io=on", image_.string()});
    if (r.exit_code != 0) r = Run({"losetup", "--find", "--show", image_.string()});
    if (r.exit_code != 0) {
      why_not_ = "losetup: " + r.output;
      return;
    }
    device_ = r.output.substr(0, r.output.find('\n'));
    if (!Remount()) {
      why_not_ = "cannot mount " + device_;
      return;
    }
    const std::string name = fsys::path(device_).filename().string();
    std::ifstream dev("/sys/block/" + name + "/dev");
    std::getline(dev, majmin_);
    group_ = kBlkio / ("epochfs-test-ra-" + std::to_string(::getpid()));
    std::error_code ec;
    fsys::create_directory(group_, ec);
    if (ec || !WriteText(group_ / "blkio.throttle.read_iops_device",
                         majmin_ + " " + std::to_string(kIops) + "\n")) {
      why_not_ = "cannot make a throttled blkio cgroup";
      return;
    }
    if (!WriteText(group_ / "cgroup.procs", std::to_string(::getpid()) + "\n")) {
      why_not_ = "cannot join the blkio cgroup";
      return;
    }
    joined_ = true;
    ok_ = true;
  }

  ~ThrottledSource() {
    if (joined_) WriteText(kBlkio / "cgroup.procs", std::to_string(::getpid()) + "\n");
    // A daemon that is still on its way out keeps the group busy a moment.
    for (int i = 0; !group_.empty() && ::rmdir(group_.c_str()) != 0 && errno == EBUSY && i < 100; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (mounted_) ::umount2(mountpoint_.c_str(), MNT_DETACH);
    if (!device_.empty()) Run({"losetup", "-d", device_});
  }

  // Unmounts and mounts the image again: nothing of it stays cached.
  bool Remount() {
    if (mounted_) {
      ::sync();
      // The daemon of an unmounted epochfs may hold the source a moment longer.
      for (int i = 0; ::umount(mountpoint_.c_str()) != 0; ++i) {
        if (errno != EBUSY || i == 100) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      mounted_ = false;
    }
    mounted_ = Run({"mount", "-o", "noatime", device_, mountpoint_.string()}).exit_code == 0;
    return mounted_;
  }

  bool ok() const { return ok_; }
  const std::string& why_not() const { return why_not_; }

 private:
  fsys::path mountpoint_, image_, group_;
  std::string device_, majmin_, why_not_;
  bool ok_ = false, mounted_ = false, joined_ = false;
};

class ReadaheadBackoffTest : public MountedDirsTest {
 protected:
  // Reads `order` with kReaders threads, each an interleaved slice (as DataLoader
  // workers take theirs); files/s. Every byte is checked.
  double ReadEpoch(const fsys::path& root, const std::vector<int>& order) {
    std::atomic<int> bad{0};
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> readers;
    for (int r = 0; r < kReaders; ++r) {
      readers.emplace_back([&, r] {
        std::string buf(kFileSize + 1, '\0');
        for (size_t i = r; i < order.size(); i += kReaders) {
          const int fd = ::open((root / names_[order[i]]).c_str(), O_RDONLY | O_CLOEXEC);
          if (fd < 0) {
            ++bad;
            continue;
          }
          size_t got = 0;
          ssize_t n;
          while ((n = ::read(fd, buf.data() + got, buf.size() - got)) > 0) got += n;
          ::close(fd);
          if (got != kFileSize || buf.compare(0, got, contents_[order[i]]) != 0) ++bad;
        }
      });
    }
    for (auto& t : readers) t.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(bad.load(), 0) << "files read wrong through " << root;
    return static_cast<double>(order.size()) / seconds;
  }

  std::vector<std::string> names_, contents_;
};

TEST_F(ReadaheadBackoffTest, EpochOneOnAFixedRateSourceIsNoSlowerThanTheSource) {
  ThrottledSource source(dir_.path(), src_);
  if (!source.ok()) GTEST_SKIP() << source.why_not();
  for (int i = 0; i < kFiles; ++i) {
    const std::string dir = "d" + std::to_string(i % 10);
    fsys::create_directories(src_ / dir);
    names_.push_back(dir + "/f" + std::to_string(i) + ".bin");
    contents_.push_back(RandomBytes(kFileSize, i));
    WriteFile(src_ / names_.back(), contents_.back());
    AgeFile(src_ / names_.back(), 3600);  // old enough to be cached
  }
  std::vector<int> order(kFiles);
  for (int i = 0; i < kFiles; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  std::string plan = "epochfs-plan 1\n";
  for (int i : order) plan += names_[i] + "\n";
  plan += "\n";

  // Each row from a cold source (the image mounted afresh) and, through epochfs, a fresh
  // mount and cache.
  auto direct = [&] {
    if (!source.Remount()) ADD_FAILURE() << "remount";
    return ReadEpoch(src_, order);
  };
  int mounts = 0;
  auto through_epochfs = [&](bool publish) -> double {
    if (!source.Remount()) ADD_FAILURE() << "remount";
    const fsys::path cache = dir_ / ("cache" + std::to_string(mounts++));
    Mount m(src_, mnt_, cache, {"--ram", "256M"});
    if (!m.ok()) {
      ADD_FAILURE() << m.output();
      return 0;
    }
    const auto start = std::chrono::steady_clock::now();
    if (publish && WritePlan(mnt_, plan) != 0) ADD_FAILURE() << "plan refused";
    const double publish_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double rate = ReadEpoch(mnt_, order);
    const auto stats = m.Stats();
    std::printf("  %s: %.0f files/s (plan written in %.2f s), read ahead %llu, overtaken %llu, "
                "gate %s, turned off %llu times\n",
                publish ? "epochfs, plan published" : "epochfs", rate, publish_s,
                static_cast<unsigned long long>(stats.value("prefetch_hits", uint64_t{0})),
                static_cast<unsigned long long>(stats.value("prefetch_overtaken", uint64_t{0})),
                stats.value("readahead_gate", std::string("?")).c_str(),
                static_cast<unsigned long long>(stats.value("readahead_gate_offs", uint64_t{0})));
    // The plan's writing is part of the epoch, as a loader publishes before it reads.
    return static_cast<double>(kFiles) / (publish_s + static_cast<double>(kFiles) / rate);
  };

  const double source_rate = direct();
  std::printf("  the source directly: %.0f files/s (%d read IOPS)\n", source_rate, kIops);
  for (const bool publish : {false, true}) {
    double rate = through_epochfs(publish);
    double baseline = source_rate;
    if (rate < kTolerance * baseline) {  // once more, beside a fresh direct epoch
      baseline = direct();
      rate = std::max(rate, through_epochfs(publish));
    }
    EXPECT_GE(rate, kTolerance * baseline)
        << (publish ? "with the plan published" : "without a plan") << ": " << rate
        << " files/s through epochfs, " << baseline << " reading the source directly";
  }
}

}  // namespace
}  // namespace epochfs::testing
