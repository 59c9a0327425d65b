// Black-box tests of epochfs as an operator meets it: the systemd unit (verified, and
// its ExecStart run under a NOTIFY_SOCKET of the test's own), config files, the
// mount.epochfs helper with mount(8), the metrics endpoint, `top`, and what other users
// can read through a root daemon's mount.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/mount_fixture.h"

extern char** environ;

namespace epochfs::testing {
namespace {

bool OnPath(const std::string& program) {
  return epochfs::testing::Run({"sh", "-c", "command -v " + program}).exit_code == 0;
}

// Waits until process `pid` (not our child) is gone or a zombie.
bool WaitGone(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line)) return true;
    const auto paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size() &&
        (line[paren + 2] == 'Z' || line[paren + 2] == 'X')) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

class OpsTest : public MountedDirsTest {
 protected:
  void SetUp() override {
    MountedDirsTest::SetUp();
    if (IsSkipped()) return;
    WriteFile(src_ / "a.txt", "hello epochfs\n");
    AgeFile(src_ / "a.txt", 3600);
  }

  // `epochfs mount` of the test's folders, in the background: its daemon's pid, from the
  // mount's stats (0, with the test failed, if it did not mount).
  pid_t MountInBackground() {
    CommandResult r = Epochfs({"mount", src_.string(), mnt_.string(), "--cache-dir",
                               cache_.string(), "--ram", "64M", "--disk", "256M"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (r.exit_code != 0) return 0;
    return nlohmann::json::parse(ReadFile(mnt_ / ".epochfs" / "stats")).value("pid", 0);
  }
};

// ---------------------------------------------------------------------------------
// systemd

const fsys::path kBuildTreeUnit = EPOCHFS_BUILD_TREE_UNIT;

std::string UnitValue(const std::string& unit_text, const std::string& key) {
  std::istringstream in(unit_text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + "=", 0) == 0) return line.substr(key.size() + 1);
  }
  return "";
}

TEST(SystemdUnit, VerifiesWithoutWarnings) {
  if (!OnPath("systemd-analyze"))
    GTEST_SKIP() << "systemd-analyze is missing (apt-get install systemd)";
  TempDir dir;
  fsys::copy_file(kBuildTreeUnit, dir / "epochfs@.service");
  // A template is verified through an instance of it.
  CommandResult r = epochfs::testing::Run(
      {"systemd-analyze", "verify", (dir / "epochfs@data-imagenet.service").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "") << "systemd-analyze warns about the unit";
}

TEST(SystemdUnit, NotifyTypeAndNoPrivateMountNamespace) {
  const std::string unit = ReadFile(kBuildTreeUnit);
  EXPECT_EQ(UnitValue(unit, "Type"), "notify");
  EXPECT_EQ(UnitValue(unit, "NotifyAccess"), "main");
  EXPECT_EQ(UnitValue(unit, "Restart"), "on-failure");
  EXPECT_EQ(UnitValue(unit, "RestartPreventExitStatus"), "2");
  EXPECT_NE(UnitValue(unit, "ExecStart").find("--foreground"), std::string::npos);
  EXPECT_NE(UnitValue(unit, "ExecStop").find("umount %I"), std::string::npos);
  // Each of these gives the service its own mount namespace, where the FUSE mount
  // would be invisible to everyone else.
  for (const char* key : {"PrivateTmp", "ProtectSystem", "ProtectHome", "PrivateDevices",
                          "ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths",
                          "ProtectKernelModules", "ProtectKernelTunables", "ProtectControlGroups",
                          "PrivateMounts", "TemporaryFileSystem", "BindPaths", "RootDirectory"}) {
    EXPECT_EQ(UnitValue(unit, key), "") << key << " would hide the mount from the host";
  }
  EXPECT_NE(UnitValue(unit, "CapabilityBoundingSet").find("CAP_SYS_ADMIN"), std::string::npos);
}

// The instance name systemd would use for `path` (`systemd-escape -p`).
std::string EscapePath(const fsys::path& path) {
  CommandResult r = epochfs::testing::Run({"systemd-escape", "-p", path.string()});
  if (r.exit_code != 0) return "test-instance";
  std::string s = r.output;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// The unit's ExecStart= with the specifiers filled in, split at spaces (the unit
// quotes nothing).
// The unit's `key=` command line with the specifiers filled in, split at spaces (the
// unit quotes nothing); a leading '-' (ignore failure) is dropped.
std::vector<std::string> UnitCommand(const std::string& key, const fsys::path& source) {
  std::string line = UnitValue(ReadFile(kBuildTreeUnit), key);
  if (!line.empty() && line[0] == '-') line.erase(0, 1);
  std::vector<std::string> argv;
  std::istringstream words(line);
  std::string w;
  while (words >> w) {
    for (auto [spec, value] :
         {std::pair<std::string, std::string>{"%I", source.string()}, {"%i", EscapePath(source)}}) {
      for (size_t at; (at = w.find(spec)) != std::string::npos;) w.replace(at, 2, value);
    }
    argv.push_back(w);
  }
  return argv;
}

// An AF_UNIX datagram socket standing in for systemd's notify socket.
class NotifySocket {
 public:
  explicit NotifySocket(const fsys::path& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa {};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, path.c_str(), sizeof(sa.sun_path) - 1);
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  }
  ~NotifySocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }
  // The next datagram, or "" after `timeout`.
  std::string Receive(std::chrono::milliseconds timeout) {
    struct pollfd p = {fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return "";
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }

 private:
  fsys::path path_;
  int fd_ = -1;
  bool ok_ = false;
};

TEST_F(OpsTest, UnitExecStartSendsReadyOnlyOnceTheMountAnswersAndStoppingOnTheWayDown) {
  NotifySocket notify(dir_ / "notify.sock");
  ASSERT_TRUE(notify.ok());
  const fsys::path source = fsys::canonical(src_);
  std::vector<std::string> argv = UnitCommand("ExecStart", source);
  ASSERT_GE(argv.size(), 3u);
  ASSERT_EQ(argv[0], EPOCHFS_BINARY) << "the build-tree unit runs this build's binary";
  struct stat before {};
  ASSERT_EQ(::stat((source / "a.txt").c_str(), &before), 0);

  // The instance's config file, where the unit looks for it: it must be the one read
  // (the cache dir it names is used).
  const fsys::path config_dir = EPOCHFS_CONFIG_DIR;
  const fsys::path config = config_dir / (EscapePath(source) + ".conf");
  std::error_code ec;
  const bool made_config_dir = fsys::create_directories(config_dir, ec);
  ASSERT_FALSE(fsys::exists(config)) << config << " exists already";
  WriteFile(config, "cache_dir = \"" + cache_.string() + "\"\nram = \"64M\"\ndisk = \"256M\"\n");

  std::vector<std::string> env_strings = {"NOTIFY_SOCKET=" + (dir_ / "notify.sock").string(),
                                          "PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  std::vector<char*> envp, args;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, (dir_ / "daemon.log").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);

  // Whatever happens below: no mount, no daemon, no config file left behind.
  struct Cleanup {
    std::function<void()> f;
    ~Cleanup() { f(); }
  } cleanup{[&] {
    if (IsMounted(source)) epochfs::testing::Run({EPOCHFS_BINARY, "umount", source.string()});
    if (IsMounted(source)) ::umount2(source.c_str(), MNT_DETACH);
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
    std::error_code e;
    fsys::remove(config, e);
    if (made_config_dir) fsys::remove(config_dir, e);
  }};

  const std::string ready = notify.Receive(std::chrono::seconds(30));
  // The first thing the daemon says is READY=1, and the mount answers at once.
  EXPECT_NE(ready.find("READY=1"), std::string::npos) << ready << ReadFile(dir_ / "daemon.log");
  EXPECT_NE(ready.find("MAINPID=" + std::to_string(pid)), std::string::npos) << ready;
  struct stat after {};
  EXPECT_EQ(::stat((source / "a.txt").c_str(), &after), 0);
  EXPECT_NE(after.st_dev, before.st_dev) << "the stat was not answered by the mount";
  EXPECT_EQ(ReadFile(source / "a.txt"), "hello epochfs\n");
  EXPECT_TRUE(IsMounted(source));
  try {
    auto stats = nlohmann::json::parse(ReadFile(source / ".epochfs" / "stats"));
    EXPECT_EQ(stats["cache_dir"].get<std::string>(), fsys::canonical(cache_).string())
        << "the instance's config file was not read";
    EXPECT_EQ(stats["ram_budget_bytes"].get<uint64_t>(), 64ull << 20);
    EXPECT_EQ(stats["pid"].get<int>(), pid);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "no stats: " << e.what();
  }

  // The unit's ExecStop line.
  CommandResult umount = epochfs::testing::Run(UnitCommand("ExecStop", source));
  EXPECT_EQ(umount.exit_code, 0) << umount.output;
  const std::string stopping = notify.Receive(std::chrono::seconds(30));
  EXPECT_NE(stopping.find("STOPPING=1"), std::string::npos) << stopping;
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  pid = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(IsMounted(source));
  // ExecStopPost after a clean stop has nothing to clear, and must not fail the unit
  // (it is '-'-prefixed, but it should not even try to unmount the source).
  CommandResult post = epochfs::testing::Run(UnitCommand("ExecStopPost", source));
  EXPECT_NE(post.output.find("not an epochfs mount"), std::string::npos) << post.output;
  EXPECT_EQ(ReadFile(source / "a.txt"), "hello epochfs\n");
}

TEST_F(OpsTest, WithoutNotifySocketTheForegroundMountStillWorks) {
  // sd_notify is a no-op without NOTIFY_SOCKET: a daemonized mount is unaffected.
  ::unsetenv("NOTIFY_SOCKET");
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  EXPECT_EQ(ReadFile(mnt_ / "a.txt"), "hello epochfs\n");
}

// ---------------------------------------------------------------------------------
// Configuration files

TEST_F(OpsTest, BadConfigFileFailsTheMountNamingFileLineAndKey) {
  const fsys::path conf = dir_ / "bad.conf";
  struct Case {
    std::string text, expected;
  };
  for (const Case& c : std::vector<Case>{
           {"ram = \"64M\"\n\nread_onyl = true\n",
            conf.string() + ":3: key 'read_onyl': unknown key"},
           {"read_only = \"yes\"\n", conf.string() + ":1: key 'read_only': expected true or false"},
           {"# sizes\nram = \"8Q\"\n", conf.string() + ":2: key 'ram': "},
       }) {
    WriteFile(conf, c.text);
    CommandResult r = Epochfs({"mount", src_.string(), mnt_.string(), "--cache-dir",
                               cache_.string(), "--config", conf.string()});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(r.output.rfind("epochfs: error: " + c.expected, 0), 0u) << r.output;
    EXPECT_FALSE(IsMounted(mnt_));
    EXPECT_FALSE(fsys::exists(cache_)) << "a refused mount leaves nothing behind";
  }
  CommandResult missing =
      Epochfs({"mount", src_.string(), mnt_.string(), "--config", (dir_ / "nope.conf").string()});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("nope.conf"), std::string::npos) << missing.output;
}

TEST_F(OpsTest, ConfigFileSetsOptionsAndFlagsOverrideIt) {
  const fsys::path conf = dir_ / "good.conf";
  WriteFile(conf, "source = \"" + src_.string() + "\"\nmountpoint = \"" + mnt_.string() +
                      "\"\ncache_dir = \"" + cache_.string() +
                      "\"\nram = \"48M\"\ndisk = \"256M\"\nread_only = true\n"
                      "consistency = \"open\"\n");
  {
    CommandResult r = Epochfs({"mount", "--config", conf.string(), "--ram", "32M"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto stats = nlohmann::json::parse(ReadFile(mnt_ / ".epochfs" / "stats"));
    EXPECT_EQ(stats["ram_budget_bytes"].get<uint64_t>(), 32ull << 20) << "the flag wins";
    EXPECT_EQ(stats["ssd_budget_bytes"].get<uint64_t>(), 256ull << 20) << "from the file";
    EXPECT_TRUE(stats["read_only"].get<bool>());
    EXPECT_EQ(stats["consistency"].get<std::string>(), "open");
    EXPECT_EQ(stats["cache_dir"].get<std::string>(), fsys::canonical(cache_).string());
    EXPECT_EQ(Epochfs({"umount", mnt_.string()}).exit_code, 0);
  }
  // --config-if-exists with a missing file is the defaults.
  {
    CommandResult r =
        Epochfs({"mount", src_.string(), mnt_.string(), "--cache-dir", cache_.string(), "--ram",
                 "32M", "--disk", "256M", "--config-if-exists", (dir_ / "absent.conf").string()});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto stats = nlohmann::json::parse(ReadFile(mnt_ / ".epochfs" / "stats"));
    EXPECT_FALSE(stats["read_only"].get<bool>());
    EXPECT_EQ(Epochfs({"umount", mnt_.string()}).exit_code, 0);
  }
}

// ---------------------------------------------------------------------------------
// mount.epochfs and mount(8)

const fsys::path kHelper = EPOCHFS_MOUNT_HELPER;

TEST_F(OpsTest, MountHelperTranslatesFstabOptionsAndPlainUmountEndsTheDaemon) {
  CommandResult r =
      epochfs::testing::Run({kHelper.string(), src_.string(), mnt_.string(), "-o",
                             "ram=64M,disk=256M,cache_dir=" + cache_.string() +
                                 ",_netdev,nofail,x-systemd.requires=foo.service,ro"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(IsMounted(mnt_));
  auto stats = nlohmann::json::parse(ReadFile(mnt_ / ".epochfs" / "stats"));
  EXPECT_EQ(stats["ram_budget_bytes"].get<uint64_t>(), 64ull << 20);
  EXPECT_TRUE(stats["read_only"].get<bool>());
  EXPECT_EQ(ReadFile(mnt_ / "a.txt"), "hello epochfs\n");
  const pid_t pid = stats["pid"].get<pid_t>();
  // umount(8), as for an fstab entry: no epochfs command involved.
  CommandResult u = epochfs::testing::Run({"umount", mnt_.string()});
  EXPECT_EQ(u.exit_code, 0) << u.output;
  EXPECT_FALSE(IsMounted(mnt_));
  EXPECT_TRUE(WaitGone(pid, std::chrono::seconds(30))) << "the daemon did not exit";
  if (IsMounted(mnt_)) ::umount2(mnt_.c_str(), MNT_DETACH);
}

TEST_F(OpsTest, MountHelperRefusesUnknownOptions) {
  CommandResult r = epochfs::testing::Run({kHelper.string(), src_.string(), mnt_.string(), "-o",
                                           "ram=64M,cache_dir=" + cache_.string() + ",rma=1G"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown option 'rma=1G'"), std::string::npos) << r.output;
  EXPECT_FALSE(IsMounted(mnt_));
  // -f (fake) says what it would run and mounts nothing.
  CommandResult fake =
      epochfs::testing::Run({kHelper.string(), "-f", src_.string(), mnt_.string(), "-o", "ram=1G"});
  EXPECT_EQ(fake.exit_code, 0);
  EXPECT_NE(fake.output.find("mount " + src_.string() + " " + mnt_.string() + " --ram 1G"),
            std::string::npos)
      << fake.output;
  EXPECT_FALSE(IsMounted(mnt_));
}

// mount(8) looks for helpers in /sbin and /usr/sbin only: the test links the build's
// helper there for the duration of the test (unless one is installed already).
TEST_F(OpsTest, MountDashTEpochfsAndFstabMountAllAndUmount) {
  if (!OnPath("mount")) GTEST_SKIP() << "mount(8) is missing";
  const fsys::path link = "/usr/sbin/mount.epochfs";
  std::error_code ec;
  if (fsys::exists(fsys::symlink_status(link, ec))) {
    GTEST_SKIP() << link << " exists (an installed epochfs?); not replacing it";
  }
  fsys::create_symlink(kHelper, link, ec);
  if (ec) GTEST_SKIP() << "cannot link " << link << ": " << ec.message();
  struct Unlink {
    fsys::path p;
    ~Unlink() {
      std::error_code e;
      fsys::remove(p, e);
    }
  } unlink{link};

  CommandResult r =
      epochfs::testing::Run({"mount", "-t", "epochfs", src_.string(), mnt_.string(), "-o",
                             "ram=64M,disk=256M,cache_dir=" + cache_.string() + ",_netdev"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(IsMounted(mnt_));
  EXPECT_EQ(ReadFile(mnt_ / "a.txt"), "hello epochfs\n");
  const pid_t pid = nlohmann::json::parse(ReadFile(mnt_ / ".epochfs" / "stats"))["pid"];
  CommandResult u = epochfs::testing::Run({"umount", mnt_.string()});
  EXPECT_EQ(u.exit_code, 0) << u.output;
  EXPECT_FALSE(IsMounted(mnt_));
  EXPECT_TRUE(WaitGone(pid, std::chrono::seconds(30)));
  if (IsMounted(mnt_)) ::umount2(mnt_.c_str(), MNT_DETACH);

  // The issue's fstab line, through `mount -a` on an fstab of the test's own (-T), then
  // `umount MOUNTPOINT` as a person would.
  const fsys::path fstab = dir_ / "fstab";
  WriteFile(fstab, "# epochfs test\n" + src_.string() + "  " + mnt_.string() +
                       "  epochfs  ram=64M,disk=256M,cache_dir=" + cache_.string() +
                       ",_netdev  0 0\n");
  CommandResult all = epochfs::testing::Run({"mount", "-a", "-T", fstab.string()});
  ASSERT_EQ(all.exit_code, 0) << all.output;
  ASSERT_TRUE(IsMounted(mnt_));
  EXPECT_EQ(ReadFile(mnt_ / "a.txt"), "hello epochfs\n");
  const pid_t pid2 = nlohmann::json::parse(ReadFile(mnt_ / ".epochfs" / "stats"))["pid"];
  CommandResult u2 = epochfs::testing::Run({"umount", mnt_.string()});
  EXPECT_EQ(u2.exit_code, 0) << u2.output;
  EXPECT_FALSE(IsMounted(mnt_));
  EXPECT_TRUE(WaitGone(pid2, std::chrono::seconds(30)));
  if (IsMounted(mnt_)) ::umount2(mnt_.c_str(), MNT_DETACH);
}

// ---------------------------------------------------------------------------------
// Observability

uint16_t FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa {};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  socklen_t len = sizeof(sa);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  ::close(fd);
  return ntohs(sa.sin_port);
}

std::string HttpGet(uint16_t port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa {};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
    (void)!::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    char buf[8192];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) reply.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return reply;
}

// name{labels} -> value; fails the test on any line that is not Prometheus text.
std::map<std::string, double> ParsePrometheus(const std::string& text) {
  static const std::regex kComment(R"(# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+)");
  static const std::regex kSample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? ([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?))");
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, kComment)) continue;
    if (!std::regex_match(line, m, kSample)) {
      ADD_FAILURE() << "not Prometheus text: '" << line << "'";
      continue;
    }
    out[std::string(m[1]) + std::string(m[2])] = std::stod(m[3]);
  }
  return out;
}

TEST_F(OpsTest, MetricsEndpointServesPrometheusTextMatchingStats) {
  Dataset d = Dataset::Make(src_, 40, 2, 20000, 7);
  const uint16_t port = FreePort();
  const fsys::path textfile = dir_ / "epochfs.prom";
  Mount m(src_, mnt_, cache_,
          {"--metrics-listen", "127.0.0.1:" + std::to_string(port), "--metrics-textfile",
           textfile.string()});
  ASSERT_TRUE(m.ok()) << m.output();
  for (int pass = 0; pass < 2; pass++) {
    for (const auto& [name, content] : d.files) ASSERT_EQ(ReadFile(mnt_ / name), content);
  }
  const std::string reply = HttpGet(port, "/metrics");
  ASSERT_EQ(reply.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << reply;
  EXPECT_NE(reply.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  const auto samples = ParsePrometheus(reply.substr(reply.find("\r\n\r\n") + 4));
  auto stats = m.Stats();  // nothing is read between the scrape and this
  const std::string mp = "{mountpoint=\"" + fsys::canonical(mnt_).string() + "\"";
  auto at = [&](const std::string& key) {
    auto it = samples.find(key);
    EXPECT_NE(it, samples.end()) << key;
    return it == samples.end() ? -1.0 : it->second;
  };
  EXPECT_EQ(at("epochfs_cache_hits_total" + mp + ",tier=\"ram\"}"),
            stats["ram_hits"].get<double>());
  EXPECT_EQ(at("epochfs_cache_hits_total" + mp + ",tier=\"ssd\"}"),
            stats["ssd_hits"].get<double>());
  EXPECT_EQ(at("epochfs_misses_total" + mp + "}"), stats["misses"].get<double>());
  EXPECT_EQ(at("epochfs_source_reads_total" + mp + "}"), stats["source_reads"].get<double>());
  EXPECT_EQ(at("epochfs_source_bytes_total" + mp + "}"), stats["source_bytes"].get<double>());
  EXPECT_EQ(at("epochfs_tier_bytes" + mp + ",tier=\"ram\"}"), stats["ram_bytes"].get<double>());
  EXPECT_EQ(at("epochfs_corrupt_entries_total" + mp + "}"), 0);
  EXPECT_GT(at("epochfs_cache_hits_total" + mp + ",tier=\"ram\"}"), 0);
  EXPECT_GT(at("epochfs_requests_total" + mp + ",kind=\"lookup\"}"), 0);
  EXPECT_GT(at("epochfs_daemon_rss_bytes" + mp + "}"), 0);
  EXPECT_EQ(HttpGet(port, "/").rfind("HTTP/1.0 404", 0), 0u);
  // The textfile was written at start (and is rewritten every 10 s).
  const auto file_samples = ParsePrometheus(ReadFile(textfile));
  EXPECT_GT(file_samples.count("epochfs_daemon_rss_bytes" + mp + "}"), 0u);
}

TEST_F(OpsTest, MetricsListenRefusesNonLoopbackAndTakenPorts) {
  CommandResult r = Epochfs({"mount", src_.string(), mnt_.string(), "--cache-dir", cache_.string(),
                             "--metrics-listen", "0.0.0.0:9464"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("not loopback"), std::string::npos) << r.output;
  EXPECT_FALSE(IsMounted(mnt_));
  const uint16_t port = FreePort();
  Mount first(src_, mnt_, cache_, {"--metrics-listen", "127.0.0.1:" + std::to_string(port)});
  ASSERT_TRUE(first.ok()) << first.output();
  const fsys::path mnt2 = dir_ / "mnt2";
  fsys::create_directories(mnt2);
  Mount second(src_, mnt2, dir_ / "cache2",
               {"--metrics-listen", "127.0.0.1:" + std::to_string(port)});
  EXPECT_FALSE(second.ok());
  EXPECT_NE(second.output().find("metrics endpoint"), std::string::npos) << second.output();
  EXPECT_FALSE(IsMounted(mnt2));
}

TEST_F(OpsTest, TopOnceShowsTheMount) {
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  ASSERT_EQ(ReadFile(mnt_ / "a.txt"), "hello epochfs\n");
  CommandResult r = Epochfs({"top", mnt_.string(), "--once", "--interval", "0.2"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("epochfs top  " + fsys::canonical(mnt_).string()), std::string::npos)
      << r.output;
  // The prefetcher's classification: one read is too few to name a pattern.
  EXPECT_NE(r.output.find("epoch pattern     unknown"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("RAM tier"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("source reads"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("\033["), std::string::npos) << "no ANSI codes when not a terminal";
  CommandResult bad = Epochfs({"top", src_.string(), "--once"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
}

// `top -H`, `perf --sort comm` and gdb tell the daemon's threads apart by name: which
// share of its CPU is FUSE requests, readahead, page drops or the access watcher.
TEST_F(OpsTest, TheDaemonsThreadsAreNamedByWhatTheyDo) {
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  ASSERT_EQ(ReadFile(mnt_ / "a.txt"), "hello epochfs\n");  // a request: a worker named
  const pid_t pid = nlohmann::json::parse(ReadFile(mnt_ / ".epochfs" / "stats"))["pid"];
  std::set<std::string> names;
  for (const auto& task : fsys::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::string name = ReadFile(task.path() / "comm");
    if (!name.empty() && name.back() == '\n') name.pop_back();
    names.insert(name);
  }
  std::string all;
  for (const std::string& n : names) all += n + " ";
  for (const char* expected : {"fuse-worker", "prefetch-0", "ssd-writer", "mem-trimmer", "ram-balance"}) {
    EXPECT_TRUE(names.count(expected)) << expected << " not among: " << all;
  }
}

// Paths are bytes, not UTF-8. The stats are JSON, which must be UTF-8, and are made
// inside a FUSE READ of .epochfs/stats: a source path or file name with invalid bytes
// must give stats with U+FFFD in their place, never an exception in the daemon.
TEST_F(OpsTest, NonUtf8SourcePathAndFileNamesStillGiveStatsAndStatus) {
  const fsys::path source = dir_ / "src-\xff\xfe";
  fsys::create_directories(source);
  WriteFile(source / "\xff\xfe.jpg", "not a jpeg\n");
  AgeFile(source / "\xff\xfe.jpg", 3600);
  Mount m(source, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  ASSERT_EQ(ReadFile(mnt_ / "\xff\xfe.jpg"), "not a jpeg\n");
  const nlohmann::json stats = m.Stats();  // parse() throws on bytes that are not UTF-8
  const std::string source_in_stats = stats.value("source", "");
  EXPECT_NE(source_in_stats.find("src-\xEF\xBF\xBD\xEF\xBF\xBD"), std::string::npos)
      << source_in_stats;
  EXPECT_EQ(stats.value("source_bytes", 0u), 11u) << stats.dump(-1, ' ', true);
  const CommandResult table = Epochfs({"status", mnt_.string()});
  EXPECT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("RAM hits"), std::string::npos) << table.output;
  const CommandResult json = Epochfs({"status", "--json", mnt_.string()});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_EQ(nlohmann::json::parse(json.output).value("pid", 0), stats.value("pid", 0));
  // The daemon is still there to answer.
  EXPECT_EQ(ReadFile(mnt_ / "\xff\xfe.jpg"), "not a jpeg\n");
  EXPECT_TRUE(m.Unmount());
}

TEST_F(OpsTest, DeadDaemonIsReportedByStatusAndUmountLazyClearsIt) {
  const pid_t pid = MountInBackground();
  ASSERT_GT(pid, 0);
  // The unit's ExecStopPost never clears a live mount.
  CommandResult live = Epochfs({"umount", "--lazy", "--dead-only", mnt_.string()});
  EXPECT_EQ(live.exit_code, 2) << live.output;
  EXPECT_NE(live.output.find("live daemon"), std::string::npos) << live.output;
  ASSERT_TRUE(IsMounted(mnt_));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_TRUE(WaitGone(pid, std::chrono::seconds(10)));
  // What tells `umount` that a daemon was killed on its way down: its pid stays in the
  // lock file (a clean shutdown clears it).
  EXPECT_EQ(ReadFile(cache_ / "lock"), std::to_string(pid));
  struct stat st {};
  EXPECT_NE(::stat((mnt_ / "a.txt").c_str(), &st), 0);
  // "Transport endpoint is not connected" (ECONNABORTED while the kernel is still
  // aborting the connection).
  EXPECT_TRUE(errno == ENOTCONN || errno == ECONNABORTED) << strerror(errno);

  const std::string mp = fsys::canonical(dir_.path()).string() + "/mnt";
  CommandResult table = Epochfs({"status"});
  EXPECT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("epochfs on " + mp + ": NOT RESPONDING"), std::string::npos)
      << table.output;
  CommandResult json = Epochfs({"status", "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.output;
  bool found = false;
  for (const auto& m : nlohmann::json::parse(json.output)) {
    if (m.value("mountpoint", "") == mp) found = m.contains("error");
  }
  EXPECT_TRUE(found) << json.output;
  // Mounting again over the dead mount says how to clear it.
  CommandResult again = Epochfs({"mount", src_.string(), mnt_.string(), "--cache-dir",
                                 cache_.string(), "--ram", "64M", "--disk", "256M"});
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_NE(again.output.find("epochfs umount --lazy"), std::string::npos) << again.output;

  CommandResult u = Epochfs({"umount", "--lazy", "--dead-only", mnt_.string()});
  EXPECT_EQ(u.exit_code, 0) << u.output;
  EXPECT_FALSE(IsMounted(mnt_));
  if (IsMounted(mnt_)) ::umount2(mnt_.c_str(), MNT_DETACH);
}

// A daemon that no longer answers (stopped here; in life, a thread of it waiting on the
// kernel for a READ no one serves, which even kill -9 cannot end) holds its readers until
// `umount --abort` aborts the connection: they fail with ENOTCONN at once, the mount goes,
// and the daemon, let go, exits.
TEST_F(OpsTest, UmountAbortFreesTheReadersOfADaemonThatStoppedAnswering) {
  const pid_t pid = MountInBackground();
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  // kill() returns before every thread has stopped: a worker still running could answer
  // the reader below. Stopped: every thread in state T.
  const auto all_stopped = [pid] {
    for (const auto& task : fsys::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
      std::ifstream stat(task.path() / "stat");
      std::string line;
      std::getline(stat, line);
      const auto close = line.rfind(')');
      if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'T') {
        return false;
      }
    }
    return true;
  };
  for (int i = 0; i < 200 && !all_stopped(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(all_stopped()) << "the daemon did not stop";
  struct Resume {  // whatever fails below, the daemon runs again and its mount goes
    pid_t pid;
    fsys::path mountpoint;
    ~Resume() {
      ::kill(pid, SIGCONT);
      if (IsMounted(mountpoint)) ::umount2(mountpoint.c_str(), MNT_DETACH);
    }
  } resume{pid, mnt_};
  // A reader whose LOOKUP the stopped daemon never answers.
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t reader = ::fork();
  if (reader == 0) {
    const int fd = ::open((mnt_ / "never-looked-up").c_str(), O_RDONLY | O_CLOEXEC);
    const int err = fd < 0 ? errno : 0;
    (void)!::write(pipe_fds[1], &err, sizeof err);
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  struct pollfd waiting{pipe_fds[0], POLLIN, 0};
  EXPECT_EQ(::poll(&waiting, 1, 300), 0) << "the reader was answered by a stopped daemon";

  // The command waits for the daemon to exit, which it can only do once it runs again.
  const std::string binary = EPOCHFS_BINARY, mountpoint = mnt_.string();
  const pid_t umount = ::fork();
  if (umount == 0) {
    ::execl(binary.c_str(), binary.c_str(), "umount", "--abort", mountpoint.c_str(), nullptr);
    ::_exit(127);
  }
  ASSERT_EQ(::poll(&waiting, 1, 10000), 1) << "the reader is still blocked after the abort";
  int err = 0;
  ASSERT_EQ(::read(pipe_fds[0], &err, sizeof err), static_cast<ssize_t>(sizeof err));
  ::close(pipe_fds[0]);
  EXPECT_TRUE(err == ENOTCONN || err == ECONNABORTED) << strerror(err);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (IsMounted(mnt_) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(IsMounted(mnt_));
  ASSERT_EQ(::kill(pid, SIGCONT), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(umount, &status, 0), umount);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(WaitGone(pid, std::chrono::seconds(30))) << "the daemon did not exit";
  ASSERT_EQ(::waitpid(reader, &status, 0), reader);
}

// ---------------------------------------------------------------------------------
// Security: a root daemon must not let a user read what the source refuses them.

constexpr const char* kNobody = "65534";

CommandResult AsUser(const std::string& uid, const std::vector<std::string>& args) {
  std::vector<std::string> full = {"setpriv", "--reuid=" + uid, "--regid=" + uid, "--clear-groups",
                                   "--"};
  full.insert(full.end(), args.begin(), args.end());
  return Run(full);
}

class PermissionTest : public OpsTest {
 protected:
  void SetUp() override {
    OpsTest::SetUp();
    if (IsSkipped()) return;
    if (!OnPath("setpriv")) GTEST_SKIP() << "setpriv is missing (util-linux)";
    if (::getuid() != 0) GTEST_SKIP() << "needs root to act as other users";
    // Other users must be able to reach the mount at all.
    for (const auto& p : {dir_.path(), src_, mnt_}) ::chmod(p.c_str(), 0755);
    WriteFile(src_ / "secret.txt", "uid 12345 only\n");
    ASSERT_EQ(::chown((src_ / "secret.txt").c_str(), 12345, 12345), 0);
    ASSERT_EQ(::chmod((src_ / "secret.txt").c_str(), 0600), 0);
    WriteFile(src_ / "public.txt", "everyone\n");
    ::chmod((src_ / "public.txt").c_str(), 0644);
    AgeFile(src_ / "secret.txt", 3600);
    AgeFile(src_ / "public.txt", 3600);
    // The source itself refuses nobody the secret: the control for what follows.
    ASSERT_NE(AsUser(kNobody, {"cat", (src_ / "secret.txt").string()}).exit_code, 0);
    ASSERT_EQ(AsUser(kNobody, {"cat", (src_ / "public.txt").string()}).exit_code, 0);
  }
};

TEST_F(PermissionTest, WithoutAllowOtherOtherUsersGetNothing) {
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  ASSERT_EQ(ReadFile(mnt_ / "secret.txt"), "uid 12345 only\n");  // root, the mounter
  for (const char* name : {"public.txt", "secret.txt", ".epochfs/stats"}) {
    CommandResult r = AsUser(kNobody, {"cat", (mnt_ / name).string()});
    EXPECT_NE(r.exit_code, 0) << name << ": " << r.output;
    EXPECT_NE(r.output.find("Permission denied"), std::string::npos) << name << ": " << r.output;
  }
  CommandResult ls = AsUser(kNobody, {"ls", mnt_.string()});
  EXPECT_NE(ls.exit_code, 0) << ls.output;
  // Even the file's owner is another user to a mount without allow_other.
  EXPECT_NE(AsUser("12345", {"cat", (mnt_ / "secret.txt").string()}).exit_code, 0);
}

TEST_F(PermissionTest, WithAllowOtherTheSourcePermissionsApply) {
  Mount m(src_, mnt_, cache_, {"--allow-other"});
  ASSERT_TRUE(m.ok()) << m.output();
  // Root reads the secret first, so its bytes are in the cache tiers and the kernel's
  // page cache: a cache hit must not bypass the check either.
  ASSERT_EQ(ReadFile(mnt_ / "secret.txt"), "uid 12345 only\n");
  ASSERT_EQ(ReadFile(mnt_ / "secret.txt"), "uid 12345 only\n");

  CommandResult secret = AsUser(kNobody, {"cat", (mnt_ / "secret.txt").string()});
  EXPECT_NE(secret.exit_code, 0) << secret.output;
  EXPECT_NE(secret.output.find("Permission denied"), std::string::npos) << secret.output;
  EXPECT_EQ(secret.output.find("uid 12345 only"), std::string::npos);
  CommandResult pub = AsUser(kNobody, {"cat", (mnt_ / "public.txt").string()});
  EXPECT_EQ(pub.exit_code, 0) << pub.output;
  EXPECT_EQ(pub.output, "everyone\n");
  CommandResult owner = AsUser("12345", {"cat", (mnt_ / "secret.txt").string()});
  EXPECT_EQ(owner.exit_code, 0) << owner.output;
  EXPECT_EQ(owner.output, "uid 12345 only\n");
  // Writing is refused the same way: nobody may not replace the owner's file.
  CommandResult write = AsUser(kNobody, {"sh", "-c", "echo x > " + (mnt_ / "secret.txt").string()});
  EXPECT_NE(write.exit_code, 0);
  EXPECT_EQ(ReadFile(src_ / "secret.txt"), "uid 12345 only\n");

  // The control file is world-readable, and holds counters and paths only.
  CommandResult stats = AsUser(kNobody, {"cat", (mnt_ / ".epochfs/stats").string()});
  EXPECT_EQ(stats.exit_code, 0) << stats.output;
  EXPECT_EQ(stats.output.find("secret.txt"), std::string::npos);
  EXPECT_EQ(stats.output.find("uid 12345 only"), std::string::npos);
  // And it cannot be written.
  EXPECT_NE(
      AsUser(kNobody, {"sh", "-c", "echo {} > " + (mnt_ / ".epochfs/stats").string()}).exit_code,
      0);
}


// The cache holds the bytes and names of what root read through the mount: no other user
// may read any of it, and a cache made by an older version (its files readable by
// everyone) is closed at the next mount.
TEST_F(PermissionTest, TheCacheIsReadableByTheDaemonsUserAlone) {
  fsys::create_directories(src_ / "private");
  ASSERT_EQ(::chmod((src_ / "private").c_str(), 0700), 0);
  WriteFile(src_ / "private" / "hidden-name.bin", "secret bytes 0600 in 0700\n");
  ASSERT_EQ(::chmod((src_ / "private" / "hidden-name.bin").c_str(), 0600), 0);
  AgeFile(src_ / "private" / "hidden-name.bin", 3600);
  // Enough files for the prefetcher to record an epoch (and its file names).
  std::vector<std::string> names = {"private/hidden-name.bin", "secret.txt"};
  for (int i = 0; i < 40; i++) {
    names.push_back("private/more-" + std::to_string(i) + ".bin");
    WriteFile(src_ / names.back(), "more secret bytes " + std::to_string(i) + "\n");
    ASSERT_EQ(::chmod((src_ / names.back()).c_str(), 0600), 0);
    AgeFile(src_ / names.back(), 3600);
  }
  auto read_as_root = [&] {
    Mount m(src_, mnt_, cache_, {"--allow-other"});
    ASSERT_TRUE(m.ok()) << m.output();
    for (const auto& name : names) ASSERT_FALSE(ReadFile(mnt_ / name).empty()) << name;
    ASSERT_EQ(ReadFile(mnt_ / "private" / "hidden-name.bin"), "secret bytes 0600 in 0700\n");
    EXPECT_TRUE(m.Unmount());  // packs flushed, the epoch record written
  };
  // Nothing under the cache dir opens for reading as nobody, not even by a full path
  // (root lists them), and grep over the tree finds neither the bytes nor the names.
  auto nobody_reads_nothing = [&](const std::string& when) {
    std::vector<std::string> files;
    for (const auto& e : fsys::recursive_directory_iterator(cache_)) {
      if (e.is_regular_file()) files.push_back(e.path().string());
    }
    ASSERT_GT(files.size(), 3u) << when;
    int opened = 0;
    std::string which;
    for (const auto& f : files) {
      if (AsUser(kNobody, {"head", "-c", "1", f}).exit_code == 0) {
        opened++;
        which += " " + f;
      }
    }
    EXPECT_EQ(opened, 0) << when << ": nobody opened" << which;
    for (const char* needle : {"secret bytes", "uid 12345 only", "hidden-name"}) {
      CommandResult grep = AsUser(kNobody, {"grep", "-r", "-l", "-a", needle, cache_.string()});
      EXPECT_EQ(grep.output.find(cache_.string() + "/"), std::string::npos)
          << when << ": " << needle << " found: " << grep.output;
    }
    struct ::stat st {};
    ASSERT_EQ(::stat(cache_.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 077, 0u) << when;
  };
  read_as_root();
  read_as_root();  // the files the record names are admitted to the SSD tier
  {
    // The control: the record names the file, the packs hold its bytes.
    bool named = false;
    for (const auto& e : fsys::recursive_directory_iterator(cache_)) {
      if (e.is_regular_file() && ReadFile(e.path()).find("hidden-name") != std::string::npos) {
        named = true;
      }
    }
    ASSERT_TRUE(named) << "the epoch record should name the file";
  }
  nobody_reads_nothing("made by this version");
  // As an older version left it: everything readable by everyone.
  ASSERT_EQ(epochfs::testing::Run({"chmod", "-R", "go+rX", cache_.string()}).exit_code, 0);
  ASSERT_EQ(AsUser(kNobody, {"grep", "-r", "-q", "-a", "secret bytes", cache_.string()}).exit_code, 0)
      << "the control: an open cache gives the bytes away";
  read_as_root();
  nobody_reads_nothing("made by an older version, mounted again");
}

// The stats sockets' folder is root's and 0755: another user can create, remove or
// replace nothing in it. One that got there anyway (a folder an older version left open)
// and bound a socket of its own is not believed by `status` or `umount --dead-only`.
TEST_F(PermissionTest, OtherUsersCannotTouchTheStatsSockets) {
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();
  const fsys::path run = "/run/epochfs";
  struct ::stat st {};
  ASSERT_EQ(::stat(run.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  const std::string mine = [&] {
    // The socket of this mount: named by its device number.
    std::ifstream in("/proc/self/mountinfo");
    for (std::string line; std::getline(in, line);) {
      std::istringstream f(line);
      std::string id, parent, dev, root, mp;
      f >> id >> parent >> dev >> root >> mp;
      if (mp == fsys::canonical(mnt_).string()) {
        std::replace(dev.begin(), dev.end(), ':', '-');
        return (run / (dev + ".sock")).string();
      }
    }
    return std::string();
  }();
  ASSERT_TRUE(fsys::exists(mine)) << mine;
  EXPECT_NE(AsUser(kNobody, {"touch", (run / "planted").string()}).exit_code, 0);
  EXPECT_NE(AsUser(kNobody, {"rm", "-f", mine}).exit_code, 0);
  EXPECT_TRUE(fsys::exists(mine));
  EXPECT_NE(AsUser(kNobody, {"ln", "-sf", "/etc/passwd", mine}).exit_code, 0);
  ASSERT_EQ(::lstat(mine.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_uid, 0u);

  // As an older version left the folder: open to everyone. Nobody replaces the socket
  // with one of their own that answers with made-up stats.
  ASSERT_EQ(::chmod(run.c_str(), 0777), 0);
  const std::string fake_server =
      "import os, socket, time\n"
      "p = '" + mine + "'\n"
      "os.unlink(p)\n"
      "s = socket.socket(socket.AF_UNIX)\n"
      "s.bind(p)\n"
      "s.listen(8)\n"
      "s.settimeout(1)\n"
      "end = time.time() + 6\n"
      "while time.time() < end:\n"
      "    try:\n"
      "        c, _ = s.accept()\n"
      "    except socket.timeout:\n"
      "        continue\n"
      "    c.sendall(b'{\"pid\": 1, \"mountpoint\": \"FAKE\", \"fake_counter\": 42}\\n')\n"
      "    c.close()\n";
  std::thread impostor([&] { AsUser(kNobody, {"/usr/bin/python3", "-c", fake_server}); });
  bool replaced = false;
  for (int i = 0; i < 100 && !replaced; i++) {
    replaced = ::lstat(mine.c_str(), &st) == 0 && st.st_uid == 65534;
    if (!replaced) std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  ::chmod(run.c_str(), 0755);
  ASSERT_TRUE(replaced) << "the control: an open folder lets another user in";
  CommandResult status = Epochfs({"status", mnt_.string(), "--json"});
  EXPECT_EQ(status.output.find("fake_counter"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("uid 65534"), std::string::npos) << status.output;
  CommandResult dead_only = Epochfs({"umount", "--lazy", "--dead-only", mnt_.string()});
  EXPECT_EQ(dead_only.exit_code, 2) << dead_only.output;
  EXPECT_NE(dead_only.output.find("live daemon (pid " + std::to_string(m.Stats()["pid"].get<int>())),
            std::string::npos)
      << dead_only.output;
  impostor.join();
  ::unlink(mine.c_str());
  EXPECT_TRUE(m.Unmount());
  // The next mount narrows the folder an older version left open.
  ASSERT_EQ(::chmod(run.c_str(), 0777), 0);
  Mount again(src_, mnt_, cache_);
  ASSERT_TRUE(again.ok()) << again.output();
  ASSERT_EQ(::stat(run.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

}  // namespace
}  // namespace epochfs::testing
