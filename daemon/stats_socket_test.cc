#include "daemon/stats_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
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
    auto reply = QueryStatsSocket(path, ::geteuid(), 2.0);
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->text, "{\"pid\": 1}\n");
    EXPECT_EQ(reply->pid, ::getpid());
  }
  EXPECT_EQ(renders.load(), 3);
  socket->reset();
  EXPECT_FALSE(std::filesystem::exists(path)) << "removed when the daemon stops";
  EXPECT_EQ(QueryStatsSocket(path, ::geteuid(), 2.0).status().code(), Code::kNotFound);
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
  EXPECT_EQ(QueryStatsSocket(path, ::geteuid(), 1.0).status().code(), Code::kNotFound);
  auto fresh = StatsSocket::Start(path, true, [] { return std::string("new"); });
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  auto reply = QueryStatsSocket(path, ::geteuid(), 2.0);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->text, "new");
}

// The socket's folder: made 0755 whatever the umask, and narrowed to it when an older
// version left it writable by everyone (so that nobody else can unlink a socket there and
// bind one of their own); the socket's mode is exact whatever the umask.
TEST(StatsSocket, ItsFolderAndModeAreExact) {
  TempDir dir;
  const auto run = dir / "run";
  std::filesystem::create_directories(run);
  ASSERT_EQ(::chmod(run.c_str(), 0777), 0);
  const mode_t umask_before = ::umask(0077);
  auto socket = StatsSocket::Start(run / "0-5.sock", /*everyone=*/true, [] { return std::string("x"); });
  ::umask(umask_before);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  struct ::stat st {};
  ASSERT_EQ(::stat(run.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat((run / "0-5.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0666u);
  auto fresh = StatsSocket::Start(dir / "new" / "0-6.sock", false, [] { return std::string("y"); });
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  ASSERT_EQ(::stat((dir / "new").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

// A socket served by another user (one who unlinked the daemon's and bound their own) is
// refused: its answer could say anything.
TEST(StatsSocket, APeerOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to serve a socket as another user";
  TempDir dir;
  const auto path = dir / "0-8.sock";
  ASSERT_EQ(::chmod(dir.path().c_str(), 0777), 0);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) _exit(1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path.c_str());
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 4) != 0) {
      _exit(2);
    }
    char one = 1;
    if (::write(ready[1], &one, 1) != 1) _exit(3);
    const int client = ::accept(fd, nullptr, nullptr);
    const char fake[] = "{\"pid\": 1, \"fake\": true}\n";
    if (client >= 0 && ::write(client, fake, sizeof(fake) - 1) < 0) _exit(4);
    ::sleep(1);
    _exit(0);
  }
  ::close(ready[1]);
  char one = 0;
  ASSERT_EQ(::read(ready[0], &one, 1), 1) << "the other user's socket was not bound";
  ::close(ready[0]);
  auto reply = QueryStatsSocket(path, /*daemon_uid=*/0, 2.0);
  EXPECT_EQ(reply.status().code(), Code::kPermission) << (reply.ok() ? reply->text : "");
  EXPECT_NE(reply.status().message().find("uid 65534"), std::string::npos)
      << reply.status().message();
  int status = 0;
  ::waitpid(child, &status, 0);
}

}  // namespace
}  // namespace epochfs::daemon
