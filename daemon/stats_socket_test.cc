#include "daemon/stats_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "base/testing/test_files.h"

namespace epochfs::daemon {
namespace {

using epochfs::testing::TempDir;

TEST(StatsSocket, ServesEveryClientAndGivesTheDaemonsPid) {
  TempDir dir;
  const auto path = dir / "run" / "0-99.sock";
  std::atomic<int> renders{0};
  auto socket = StatsSocket::Start(path, /*everyone=*/false, [&] {
    renders++;
    return std::string("{\"pid\": 1}\n");
  });
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  struct ::stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  for (int i = 0; i < 3; i++) {
    auto reply = QueryStatsSocket(path, 2.0);
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->text, "{\"pid\": 1}\n");
    EXPECT_EQ(reply->pid, ::getpid());
  }
  EXPECT_EQ(renders.load(), 3);
  socket->reset();
  EXPECT_FALSE(std::filesystem::exists(path)) << "removed when the daemon stops";
  EXPECT_EQ(QueryStatsSocket(path, 2.0).status().code(), Code::kNotFound);
}

// A daemon killed -9 leaves its socket file behind: clients see no daemon there, and
// the next daemon on that device number takes the path over.
TEST(StatsSocket, ReplacesAStaleSocket) {
  TempDir dir;
  const auto path = dir / "0-7.sock";
  {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ::close(fd);  // the file stays, nobody listens
  }
  EXPECT_EQ(QueryStatsSocket(path, 1.0).status().code(), Code::kNotFound);
  auto fresh = StatsSocket::Start(path, true, [] { return std::string("new"); });
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  auto reply = QueryStatsSocket(path, 2.0);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->text, "new");
}

}  // namespace
}  // namespace epochfs::daemon
