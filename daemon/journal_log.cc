#include "daemon/journal_log.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "spdlog/pattern_formatter.h"

namespace epochfs::daemon {
namespace {

class PriorityPrefix : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    char prefix = '6';
    switch (msg.level) {
      case spdlog::level::critical:
        prefix = '2';
        break;
      case spdlog::level::err:
        prefix = '3';
        break;
      case spdlog::level::warn:
        prefix = '4';
        break;
      case spdlog::level::info:
        prefix = '6';
        break;
      default:
        prefix = '7';
        break;
    }
    const char text[3] = {'<', prefix, '>'};
    dest.append(text, text + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<PriorityPrefix>();
  }
};

}  // namespace

bool StderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(stream, "%llu:%llu", &dev, &ino) != 2) return false;
  struct ::stat st {};
  if (::fstat(2, &st) < 0) return false;
  return st.st_dev == dev && st.st_ino == ino;
}

std::unique_ptr<spdlog::formatter> JournalFormatter() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<PriorityPrefix>('*').set_pattern("%*%v");
  return formatter;
}

}  // namespace epochfs::daemon
