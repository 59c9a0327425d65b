#include "cache/io_engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "cache/testing/fault_io_engine.h"
#include "cache/testing/test_files.h"
#include "base/unique_fd.h"

namespace epochfs::cache {
namespace {

using testing::FaultInjectingIoEngine;
using testing::RandomBytes;
using testing::TempDir;
using testing::WriteFile;

// Runs each test with the pread engine and, where the kernel allows, io_uring.
class IoEngineTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      Result<std::unique_ptr<IoEngine>> uring = NewIoUringIoEngine();
      if (!uring.ok()) GTEST_SKIP() << "io_uring unavailable: " << uring.status().ToString();
      engine_ = std::move(uring).value();
      ASSERT_TRUE(engine_->is_io_uring());
    } else {
      engine_ = NewPreadIoEngine();
      ASSERT_FALSE(engine_->is_io_uring());
    }
    content_ = RandomBytes(300'000, 7);
    WriteFile(dir_ / "f", content_);
    fd_.reset(::open((dir_ / "f").c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd_);
  }

  TempDir dir_;
  std::unique_ptr<IoEngine> engine_;
  std::string content_;
  UniqueFd fd_;
};

TEST_P(IoEngineTest, ReadAtReadsExactlyAndStopsAtEndOfFile) {
  std::string buf(1000, '\0');
  Result<size_t> n = engine_->ReadAt(fd_.get(), buf.data(), buf.size(), 12345);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1000u);
  EXPECT_EQ(buf, content_.substr(12345, 1000));

  // Across the end of file: the bytes up to EOF, no error.
  std::string tail(5000, '\0');
  n = engine_->ReadAt(fd_.get(), tail.data(), tail.size(), content_.size() - 100);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 100u);
  EXPECT_EQ(tail.substr(0, 100), content_.substr(content_.size() - 100));

  n = engine_->ReadAt(fd_.get(), tail.data(), tail.size(), content_.size() + 10);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
}

TEST_P(IoEngineTest, ReadBatchGivesEachOpItsOwnResult) {
  // More ops than the ring is deep, one of them past EOF, one on a bad fd.
  constexpr size_t kOps = 150;
  std::vector<std::string> bufs(kOps, std::string(2000, '\0'));
  std::vector<ReadOp> ops(kOps);
  for (size_t i = 0; i < kOps; ++i) {
    ops[i].fd = fd_.get();
    ops[i].buf = bufs[i].data();
    ops[i].len = bufs[i].size();
    ops[i].offset = i * 1999;
  }
  ops[10].offset = content_.size() - 500;
  ops[20].fd = 987654;  // not open
  Status st = engine_->ReadBatch(ops);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(ops[20].status.err(), EBADF);
  for (size_t i = 0; i < kOps; ++i) {
    if (i == 20) continue;
    ASSERT_TRUE(ops[i].status.ok()) << i << ": " << ops[i].status.ToString();
    const size_t expect = std::min<size_t>(2000, content_.size() - ops[i].offset);
    ASSERT_EQ(ops[i].bytes_read, expect) << i;
    EXPECT_EQ(bufs[i].substr(0, expect), content_.substr(ops[i].offset, expect)) << i;
  }
}

TEST_P(IoEngineTest, WriteAtThenReadBack) {
  UniqueFd out(::open((dir_ / "out").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_TRUE(out);
  ASSERT_TRUE(engine_->WriteAt(out.get(), content_.data(), content_.size(), 4096).ok());
  ASSERT_TRUE(engine_->DataSync(out.get()).ok());
  std::string back(content_.size(), '\0');
  Result<size_t> n = engine_->ReadAt(out.get(), back.data(), back.size(), 4096);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, content_.size());
  EXPECT_EQ(back, content_);
  // A read-only fd cannot be written: the errno survives as the status's err().
  Status bad = engine_->WriteAt(fd_.get(), "x", 1, 0);
  EXPECT_EQ(bad.err(), EBADF);
}

TEST_P(IoEngineTest, ManyThreadsShareOneEngine) {
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::string buf(3000, '\0');
      for (int i = 0; i < 200; ++i) {
        const uint64_t off = (static_cast<uint64_t>(t) * 7919 + i * 131) % 290'000;
        Result<size_t> n = engine_->ReadAt(fd_.get(), buf.data(), buf.size(), off);
        if (!n.ok() || buf.substr(0, *n) != content_.substr(off, *n)) ++mismatches;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, IoEngineTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "IoUring" : "Pread"; });

TEST(IoEngineFactoryTest, FallsBackToPreadWhenAskedTo) {
  EXPECT_FALSE(NewIoEngine(false)->is_io_uring());
  // With io_uring preferred the result is whatever the kernel allows; either way it reads.
  std::unique_ptr<IoEngine> engine = NewIoEngine(true);
  TempDir dir;
  WriteFile(dir / "f", "hello");
  UniqueFd fd(::open((dir / "f").c_str(), O_RDONLY | O_CLOEXEC));
  char buf[8];
  Result<size_t> n = engine->ReadAt(fd.get(), buf, sizeof(buf), 0);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "hello");
}

TEST(FaultInjectingIoEngineTest, InjectsWhatItIsTold) {
  TempDir dir;
  const std::string content = RandomBytes(10'000, 9);
  WriteFile(dir / "f", content);
  UniqueFd fd(::open((dir / "f").c_str(), O_RDWR | O_CLOEXEC));
  FaultInjectingIoEngine io(NewPreadIoEngine());
  std::string buf(1000, '\0');

  io.FailNthRead(2, EIO);
  EXPECT_TRUE(io.ReadAt(fd.get(), buf.data(), buf.size(), 0).ok());
  Result<size_t> failed = io.ReadAt(fd.get(), buf.data(), buf.size(), 0);
  EXPECT_EQ(failed.status().err(), EIO);
  EXPECT_TRUE(io.ReadAt(fd.get(), buf.data(), buf.size(), 0).ok());

  io.SetMaxReadBytes(10);
  EXPECT_EQ(*io.ReadAt(fd.get(), buf.data(), buf.size(), 0), 10u);
  io.SetMaxReadBytes(0);

  io.FlipBitInNextReads(1);
  ASSERT_EQ(*io.ReadAt(fd.get(), buf.data(), buf.size(), 0), 1000u);
  EXPECT_NE(buf, content.substr(0, 1000));
  ASSERT_EQ(*io.ReadAt(fd.get(), buf.data(), buf.size(), 0), 1000u);
  EXPECT_EQ(buf, content.substr(0, 1000));

  io.FailWrites(ENOSPC);
  Status st = io.WriteAt(fd.get(), "abc", 3, 0);
  EXPECT_EQ(st.code(), Code::kNoSpace);
  io.FailWrites(0);
  EXPECT_TRUE(io.WriteAt(fd.get(), "abc", 3, 0).ok());
}

}  // namespace
}  // namespace epochfs::cache
