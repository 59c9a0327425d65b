#include "daemon/journal_log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "spdlog/details/log_msg.h"

namespace epochfs::daemon {
namespace {

std::string Format(spdlog::level::level_enum level, const char* text) {
  auto f = JournalFormatter();
  spdlog::details::log_msg msg("epochfs", level, text);
  spdlog::memory_buf_t out;
  f->format(msg, out);
  return std::string(out.data(), out.size());
}

TEST(JournalLog, LinesCarrySyslogPriorityPrefixes) {
  EXPECT_EQ(Format(spdlog::level::err, "mount failed"), "<3>mount failed\n");
  EXPECT_EQ(Format(spdlog::level::warn, "cache SSD tier degraded"), "<4>cache SSD tier degraded\n");
  EXPECT_EQ(Format(spdlog::level::info, "mounted"), "<6>mounted\n");
  EXPECT_EQ(Format(spdlog::level::debug, "x"), "<7>x\n");
}

TEST(JournalLog, StderrIsJournalOnlyWhenJournalStreamNamesIt) {
  ::unsetenv("JOURNAL_STREAM");
  EXPECT_FALSE(StderrIsJournal());
  struct ::stat st {};
  ASSERT_EQ(::fstat(2, &st), 0);
  const std::string mine = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  ::setenv("JOURNAL_STREAM", mine.c_str(), 1);
  EXPECT_TRUE(StderrIsJournal());
  ::setenv("JOURNAL_STREAM", "1:2", 1);
  EXPECT_FALSE(StderrIsJournal());
  ::unsetenv("JOURNAL_STREAM");
}

}  // namespace
}  // namespace epochfs::daemon
