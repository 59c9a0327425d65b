// The concurrency torture test: several processes write, append, truncate, mmap-write
// and rename over the same set of files, through the mount and underneath it, while
// other processes read them through the mount. Every read is checked against a model:
//
// - Each file has one owner process, which keeps the exact model of its content (as
//   fsx does). After each operation the owner reads the file back through the mount
//   with a fresh open and compares every byte. A file owned by a writer underneath the
//   mount must look right through the mount at once in "open" mode (close-to-open) and
//   within the watcher's window (2 s) in "notify" mode.
// - Every 8-byte word ever written is a tag naming its file and its word index, so a
//   reader that is not the owner can check any read it makes: each word is either a tag
//   of this file at this index or zero (a hole from a truncate that grew the file). A
//   byte of another file, of another place, or of nothing is caught.
// - At the end every file's bytes in the source are exactly its owner's model.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "tests/mount_fixture.h"

namespace epochfs::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kFilesPerOwner = 3;
constexpr uint64_t kMaxWords = 24 * 1024;  // files stay under 192 KiB
constexpr auto kRunFor = std::chrono::seconds(12);

uint64_t Tag(uint64_t file_id, uint64_t version, uint64_t word) {
  return file_id << 48 | (version & 0xffff) << 32 | (word & 0xffffffff);
}

bool WordIsPlausible(uint64_t value, uint64_t file_id, uint64_t word) {
  return value == 0 || (value >> 48 == file_id && (value & 0xffffffff) == (word & 0xffffffff));
}

std::string Words(const std::vector<uint64_t>& words) {
  return std::string(reinterpret_cast<const char*>(words.data()), words.size() * 8);
}

// What one child process found. Written to a file the parent reads.
struct Report {
  uint64_t ops = 0, checks = 0, failures = 0;
  std::vector<std::string> first_failures;
  void Fail(const std::string& what) {
    failures++;
    if (first_failures.size() < 5) first_failures.push_back(what);
  }
  void Save(const fsys::path& path) const {
    std::ofstream out(path);
    out << ops << " " << checks << " " << failures << "\n";
    for (const auto& f : first_failures) out << f << "\n";
  }
};

void WriteAll(int fd, const char* data, size_t size, off_t offset) {
  while (size > 0) {
    ssize_t n = ::pwrite(fd, data, size, offset);
    if (n <= 0) throw std::runtime_error(std::string("pwrite: ") + std::strerror(errno));
    data += n, size -= static_cast<size_t>(n), offset += n;
  }
}

// One owner: applies random operations to its files through `dir` (the mount or the
// source) and checks each result through the mount.
class Owner {
 public:
  Owner(int index, fsys::path dir, fsys::path mnt, bool underneath, bool notify)
      : index_(index), dir_(std::move(dir)), mnt_(std::move(mnt)),
        underneath_(underneath), notify_(notify), rng_(1000 + index) {
    for (int f = 0; f < kFilesPerOwner; f++) models_.emplace_back();
  }

  static std::string FileName(int owner, int f) {
    return "o" + std::to_string(owner) + "_" + std::to_string(f);
  }
  static uint64_t FileId(int owner, int f) { return 1 + owner * kFilesPerOwner + f; }

  void Run(Report& report) {
    for (int f = 0; f < kFilesPerOwner; f++) {
      WriteFile(dir_ / FileName(index_, f), "");
    }
    const auto end = Clock::now() + kRunFor;
    while (Clock::now() < end) {
      const int f = static_cast<int>(rng_() % kFilesPerOwner);
      const std::string what = Step(f);
      report.ops++;
      Check(f, what, report);
    }
    for (int f = 0; f < kFilesPerOwner; f++) {
      WriteFile(dir_ / (FileName(index_, f) + ".model"), Words(models_[f]));
    }
  }

 private:
  std::string Step(int f) {
    std::vector<uint64_t>& model = models_[f];
    const fsys::path path = dir_ / FileName(index_, f);
    const uint64_t id = FileId(index_, f);
    const uint64_t version = ++version_;
    auto tags = [&](uint64_t from, uint64_t count) {
      std::vector<uint64_t> out(count);
      for (uint64_t i = 0; i < count; i++) out[i] = Tag(id, version, from + i);
      return out;
    };
    const int op = static_cast<int>(rng_() % 5);
    if (op == 0) {  // overwrite (or extend) a range
      const uint64_t from = model.empty() ? 0 : rng_() % model.size();
      const uint64_t count = std::min<uint64_t>(1 + rng_() % 2048, kMaxWords - from);
      auto words = tags(from, count);
      int fd = ::open(path.c_str(), O_WRONLY);
      if (fd < 0) return "open for write failed";
      WriteAll(fd, reinterpret_cast<const char*>(words.data()), count * 8,
               static_cast<off_t>(from * 8));
      ::close(fd);
      if (model.size() < from + count) model.resize(from + count);
      std::copy(words.begin(), words.end(), model.begin() + static_cast<long>(from));
      return "pwrite";
    }
    if (op == 1) {  // append
      if (model.size() >= kMaxWords) return "append skipped";
      const uint64_t count = std::min<uint64_t>(1 + rng_() % 512, kMaxWords - model.size());
      auto words = tags(model.size(), count);
      int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
      if (fd < 0) return "open for append failed";
      if (::write(fd, words.data(), count * 8) != static_cast<ssize_t>(count * 8)) {
        ::close(fd);
        return "append failed";
      }
      ::close(fd);
      model.insert(model.end(), words.begin(), words.end());
      return "append";
    }
    if (op == 2) {  // truncate, shrinking or growing (a hole of zeros)
      const uint64_t words = rng_() % kMaxWords;
      if (::truncate(path.c_str(), static_cast<off_t>(words * 8)) != 0) return "truncate failed";
      model.resize(words, 0);
      return "truncate";
    }
    if (op == 3) {  // write through a shared mapping, synced, fd closed last
      if (model.empty()) return "mmap skipped";
      const uint64_t from = rng_() % model.size();
      const uint64_t count = std::min<uint64_t>(1 + rng_() % 1024, model.size() - from);
      int fd = ::open(path.c_str(), O_RDWR);
      if (fd < 0) return "open for mmap failed";
      const size_t length = model.size() * 8;
      void* map = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (map == MAP_FAILED) {
        ::close(fd);
        return std::string("mmap failed: ") + std::strerror(errno);
      }
      auto words = tags(from, count);
      std::memcpy(static_cast<char*>(map) + from * 8, words.data(), count * 8);
      ::msync(map, length, MS_SYNC);
      ::munmap(map, length);
      ::close(fd);
      std::copy(words.begin(), words.end(), model.begin() + static_cast<long>(from));
      return "mmap write";
    }
    // Rename a freshly written copy over the file.
    auto words = tags(0, model.size());
    const fsys::path tmp = dir_ / (FileName(index_, f) + ".tmp");
    WriteFile(tmp, Words(words));
    fsys::rename(tmp, path);
    model = std::move(words);
    return "rename over";
  }

  void Check(int f, const std::string& what, Report& report) {
    const std::string want = Words(models_[f]);
    const fsys::path through_mount = mnt_ / FileName(index_, f);
    report.checks++;
    std::string got = ReadWhole(through_mount);
    if (got == want) return;
    if (underneath_ && notify_) {
      // A change underneath reaches the kernel through the watcher: within 2 s.
      const auto deadline = Clock::now() + std::chrono::seconds(2);
      while (got != want && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        got = ReadWhole(through_mount);
      }
      if (got == want) return;
    }
    // ReadWhole answers a failed open with its error, in angle brackets.
    const bool open_failed = got.rfind("<open failed", 0) == 0 && got.back() == '>';
    size_t at = 0;
    while (at < std::min(got.size(), want.size()) && got[at] == want[at]) at++;
    struct ::stat st {};  // the source inode, to find the file in the daemon's log
    ::stat((dir_ / FileName(index_, f)).c_str(), &st);
    report.Fail("owner " + std::to_string(index_) + " file " + std::to_string(f) +
                " (source inode " + std::to_string(st.st_ino) + ") after " + what + ": " +
                (open_failed ? got.substr(1, got.size() - 2)
                             : "read " + std::to_string(got.size()) + " bytes, want " +
                                   std::to_string(want.size()) + ", first difference at " +
                                   std::to_string(at)));
  }

  const int index_;
  const fsys::path dir_, mnt_;
  const bool underneath_, notify_;
  std::mt19937_64 rng_;
  uint64_t version_ = 0;
  std::vector<std::vector<uint64_t>> models_;
};

// A reader that owns nothing: reads every file through the mount, with fresh opens and
// (every other pass) O_DIRECT, and checks each word's plausibility.
void ReadAndCheck(const fsys::path& mnt, int owners, Report& report) {
  const auto end = Clock::now() + kRunFor;
  for (int pass = 0; Clock::now() < end; pass++) {
    for (int o = 0; o < owners; o++) {
      for (int f = 0; f < kFilesPerOwner; f++) {
        const std::string got =
            ReadWhole(mnt / Owner::FileName(o, f), pass % 2 == 1 ? O_DIRECT : 0);
        if (got.rfind("<open failed", 0) == 0) continue;  // mid rename: the name is between
        report.checks++;
        const uint64_t id = Owner::FileId(o, f);
        for (size_t w = 0; w + 8 <= got.size(); w += 8) {
          uint64_t value;
          std::memcpy(&value, got.data() + w, 8);
          if (!WordIsPlausible(value, id, w / 8)) {
            report.Fail("reader: file o" + std::to_string(o) + "_" + std::to_string(f) +
                        " word " + std::to_string(w / 8) + " holds a byte never written there");
            break;
          }
        }
      }
    }
    report.ops++;
  }
}

class TortureTest : public MountedDirsTest, public ::testing::WithParamInterface<const char*> {
 protected:
  // A failed run keeps the daemon's debug log (the test folder goes with the test): the
  // failures are rare and timing-bound, and the log is what tells why.
  void TearDown() override {
    if (!HasFailure()) return;
    const fsys::path kept = fsys::temp_directory_path() /
                            ("epochfs-torture-" + std::string(GetParam()) + "-" +
                             std::to_string(::getpid()) + ".log");
    std::error_code ec;
    fsys::copy_file(cache_ / "epochfs.log", kept, fsys::copy_options::overwrite_existing, ec);
    std::cout << (ec ? "could not keep the daemon's log: " + ec.message()
                     : "the daemon's log is kept in " + kept.string())
              << "\n";
  }
  // The daemon's decisions to drop the kernel's cached pages of the files named in
  // `failures` (by source inode, and by the nodes the log ties to those), from its log:
  // the last 40.
  std::string DropLog(const std::string& failures) const {
    std::set<std::string> inodes, nodes;
    const std::regex inode_in_failure(R"(source inode (\d+))");
    for (std::sregex_iterator it(failures.begin(), failures.end(), inode_in_failure), end;
         it != end; ++it) {
      inodes.insert((*it)[1]);
    }
    std::vector<std::string> lines;
    {
      std::ifstream in(cache_ / "epochfs.log");
      for (std::string line; std::getline(in, line);) lines.push_back(line);
    }
    const std::regex node_of_inode(R"(node (\d+) \(source inode (\d+))");
    for (const std::string& line : lines) {
      std::smatch m;
      if (std::regex_search(line, m, node_of_inode) && inodes.count(m[2])) nodes.insert(m[1]);
    }
    const std::regex any_node(R"(node (\d+))");
    std::vector<std::string> drops;
    for (const std::string& line : lines) {
      std::smatch m;
      if (std::regex_search(line, m, any_node) && nodes.count(m[1])) drops.push_back(line);
    }
    std::string out = "the daemon's page drops of those files (" +
                      std::to_string(drops.size()) + "):\n";
    for (size_t i = drops.size() > 40 ? drops.size() - 40 : 0; i < drops.size(); ++i) {
      out += "  " + drops[i] + "\n";
    }
    return out;
  }
};

// "passthrough": "open" mode with --passthrough, where opens of files no tier holds are
// served by the kernel from the source, and writers join them (fs/passthrough.h).
INSTANTIATE_TEST_SUITE_P(Modes, TortureTest, ::testing::Values("notify", "open", "passthrough"));

TEST_P(TortureTest, ConcurrentWritersAndReadersLoseNothingAndSeeNothingWrong) {
  const bool notify = std::string(GetParam()) == "notify";
  // Debug logging: a failure then shows why the daemon dropped the kernel's pages.
  std::vector<std::string> flags = {"--consistency", notify ? "notify" : "open", "--ram", "64M",
                                    "--log-level", "debug"};
  if (std::string(GetParam()) == "passthrough") flags.push_back("--passthrough");
  Mount m(src_, mnt_, cache_, flags);
  ASSERT_TRUE(m.ok()) << m.output();
  // Owners 0 and 1 write through the mount, owner 2 underneath it; two readers.
  struct Child {
    pid_t pid;
    fsys::path report;
  };
  std::vector<Child> children;
  auto spawn = [&](const std::string& name, const std::function<void(Report&)>& body) {
    const fsys::path report_path = dir_ / (name + ".report");
    pid_t pid = ::fork();
    if (pid == 0) {
      Report report;
      try {
        body(report);
      } catch (const std::exception& e) {
        report.Fail(name + ": " + e.what());
      }
      report.Save(report_path);
      ::_exit(0);
    }
    children.push_back({pid, report_path});
  };
  constexpr int kOwners = 3;
  // Every file exists before anyone reads. A reader that looked a name up before owner 2
  // made it underneath would leave the kernel a negative entry (kept 1 s), and that
  // owner's first checks would find no file (seen beside two CPU-bound loops).
  for (int o = 0; o < kOwners; o++) {
    for (int f = 0; f < kFilesPerOwner; f++) {
      WriteFile((o == 2 ? src_ : mnt_) / Owner::FileName(o, f), "");
    }
  }
  for (int o = 0; o < kOwners; o++) {
    const bool underneath = o == 2;
    spawn("owner" + std::to_string(o), [&, o, underneath](Report& r) {
      Owner(o, underneath ? src_ : mnt_, mnt_, underneath, notify).Run(r);
    });
  }
  for (int r = 0; r < 2; r++) {
    spawn("reader" + std::to_string(r), [&](Report& rep) { ReadAndCheck(mnt_, kOwners, rep); });
  }
  for (const auto& c : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(c.pid, &status, 0), c.pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    std::ifstream in(c.report);
    uint64_t ops = 0, checks = 0, failures = 0;
    in >> ops >> checks >> failures;
    std::string line, failures_text;
    std::getline(in, line);
    while (std::getline(in, line)) failures_text += "  " + line + "\n";
    EXPECT_GT(ops, 10u) << c.report;
    EXPECT_GT(checks, 10u) << c.report;
    EXPECT_EQ(failures, 0u) << c.report << ":\n" << failures_text << DropLog(failures_text);
    std::cout << c.report.filename().string() << ": " << ops << " ops, " << checks
              << " checks, " << failures << " failures\n";
  }
  if (std::string(GetParam()) == "passthrough" && m.Stats().value("passthrough", false)) {
    const uint64_t opens = m.Stats().value("passthrough_opens", uint64_t{0});
    std::cout << "passthrough opens: " << opens << "\n";
    EXPECT_GT(opens, 0u) << "the run never served an open by passthrough";
  }
  // Nothing lost: the source holds exactly what each owner's model says, and so does
  // the mount.
  for (int o = 0; o < kOwners; o++) {
    const fsys::path base = o == 2 ? src_ : mnt_;
    for (int f = 0; f < kFilesPerOwner; f++) {
      const std::string name = Owner::FileName(o, f);
      const std::string model = ReadFile(base / (name + ".model"));
      EXPECT_EQ(ReadFile(src_ / name), model) << name << " in the source";
      if (notify) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      EXPECT_EQ(ReadFile(mnt_ / name), model) << name << " through the mount";
    }
  }
}

}  // namespace
}  // namespace epochfs::testing
