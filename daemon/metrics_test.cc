#include "daemon/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "daemon/metrics_server.h"

namespace epochfs::daemon {
namespace {

nlohmann::json SampleStats() {
  return nlohmann::json::parse(R"({
    "version": "0.1.0", "pid": 42, "source": "/data/a \"b\"", "mountpoint": "/data/a \"b\"",
    "consistency": "notify", "uptime_s": 12.5,
    "requests": {"lookup": 10, "read": 7, "open": 0},
    "request_errors": 1, "ram_hits": 5, "ram_hit_bytes": 500, "ssd_hits": 3,
    "ssd_hit_bytes": 300, "misses": 2, "miss_bytes": 200, "source_reads": 2,
    "source_bytes": 200, "ram_bytes": 800, "ram_budget_bytes": 1000, "ram_entries": 8,
    "ram_evictions": 0, "ssd_bytes": 900, "ssd_budget_bytes": 9000, "ssd_entries": 9,
    "ssd_evictions": 0, "corrupt_entries": 0, "ssd_degraded": false,
    "daemon_rss_bytes": 123456
  })");
}

// Every line is a comment (# HELP/# TYPE) or `name{labels} value`; returns
// "name{labels}" -> value and checks each family has HELP and TYPE before samples.
std::map<std::string, double> ParsePrometheus(const std::string& text) {
  static const std::regex kHelp(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)");
  static const std::regex kType(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge))");
  static const std::regex kSample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*)\} (-?[0-9.eE+]+))");
  std::map<std::string, double> samples;
  std::set<std::string> typed;
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, kHelp)) continue;
    if (std::regex_match(line, m, kType)) {
      typed.insert(m[1]);
      continue;
    }
    if (!std::regex_match(line, m, kSample)) {
      ADD_FAILURE() << "not Prometheus text: " << line;
      continue;
    }
    EXPECT_TRUE(typed.count(m[1])) << "sample before its # TYPE: " << line;
    samples[std::string(m[1]) + "{" + std::string(m[2]) + "}"] = std::stod(m[3]);
  }
  return samples;
}

TEST(Metrics, PrometheusTextParsesAndMatchesTheSnapshot) {
  const auto samples = ParsePrometheus(PrometheusText(SampleStats()));
  const std::string mp = R"(mountpoint="/data/a \"b\"")";
  EXPECT_EQ(samples.at("epochfs_cache_hits_total{" + mp + ",tier=\"ram\"}"), 5);
  EXPECT_EQ(samples.at("epochfs_cache_hits_total{" + mp + ",tier=\"ssd\"}"), 3);
  EXPECT_EQ(samples.at("epochfs_misses_total{" + mp + "}"), 2);
  EXPECT_EQ(samples.at("epochfs_requests_total{" + mp + ",kind=\"read\"}"), 7);
  EXPECT_EQ(samples.at("epochfs_tier_bytes{" + mp + ",tier=\"ssd\"}"), 900);
  EXPECT_EQ(samples.at("epochfs_ssd_degraded{" + mp + "}"), 0);
  EXPECT_EQ(samples.at("epochfs_daemon_rss_bytes{" + mp + "}"), 123456);
  EXPECT_EQ(samples.at("epochfs_uptime_seconds{" + mp + "}"), 12.5);
  // Keys missing from the snapshot give no sample (and no empty family).
  EXPECT_EQ(samples.count("epochfs_packs{" + mp + "}"), 0u);
}

// Label values are UTF-8 whatever bytes the source's path has: an invalid byte becomes
// U+FFFD, valid multi-byte characters and the three escapes stay as they are.
TEST(Metrics, LabelValuesAreValidUtf8) {
  const std::string replacement = "\xEF\xBF\xBD";
  EXPECT_EQ(EscapeLabelValue("/data/\xff\xfe"), "/data/" + replacement + replacement);
  EXPECT_EQ(EscapeLabelValue("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(EscapeLabelValue("\xC0\xAF"), replacement + replacement);  // overlong '/'
  EXPECT_EQ(EscapeLabelValue("\xED\xA0\x80"), replacement + replacement + replacement);  // surrogate
  EXPECT_EQ(EscapeLabelValue("x\xE2\x82"), "x" + replacement + replacement);  // cut short
  nlohmann::json stats = {{"mountpoint", "/mnt/\xff"}, {"source", "/src/\xfe"}};
  const std::string text = PrometheusText(stats);
  EXPECT_NE(text.find("source=\"/src/" + replacement + "\""), std::string::npos) << text;
  EXPECT_EQ(text.find('\xff'), std::string::npos);
}

TEST(Metrics, ServiceStatusLine) {
  EXPECT_EQ(ServiceStatusLine(SampleStats()),
            "Serving /data/a \"b\": 80.0% hits (RAM 50.0%, SSD 30.0%), 2 source reads, SSD "
            "900.0 B of 8.8 KiB");
  auto degraded = SampleStats();
  degraded["ssd_degraded"] = true;
  degraded["ram_hits"] = 0;
  degraded["ssd_hits"] = 0;
  degraded["misses"] = 0;
  EXPECT_NE(ServiceStatusLine(degraded).find("no reads yet"), std::string::npos);
  EXPECT_NE(ServiceStatusLine(degraded).find("(DEGRADED)"), std::string::npos);
}

TEST(Metrics, ListenAddressIsLoopbackUnlessAllowed) {
  EXPECT_TRUE(ParseListenAddress("127.0.0.1:9464", false).ok());
  EXPECT_EQ(ParseListenAddress("localhost:9464", false)->host, "127.0.0.1");
  EXPECT_FALSE(ParseListenAddress("0.0.0.0:9464", false).ok());
  EXPECT_TRUE(ParseListenAddress("0.0.0.0:9464", true).ok());
  EXPECT_FALSE(ParseListenAddress("127.0.0.1", false).ok());
  EXPECT_FALSE(ParseListenAddress("127.0.0.1:70000", false).ok());
  EXPECT_FALSE(ParseListenAddress("example.com:80", true).ok());
}

std::string Http(uint16_t port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa {};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) < 0) {
    ::close(fd);
    return "connect failed";
  }
  (void)!::send(fd, request.data(), request.size(), 0);
  std::string reply;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) reply.append(buf, n);
  ::close(fd);
  return reply;
}

TEST(MetricsExporter, ServesMetricsOnlyAndWritesTheTextfile) {
  char tmpl[] = "/tmp/epochfs-metrics-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir = tmpl;
  MetricsExporter::Options o;
  o.listen = "127.0.0.1:0";
  o.textfile = dir / "epochfs.prom";
  o.textfile_interval_s = 0.05;
  std::atomic<int> renders{0};
  auto e = MetricsExporter::Start(o, [&] {
    renders++;
    return PrometheusText(SampleStats());
  });
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_NE((*e)->port(), 0);
  const std::string ok = Http((*e)->port(), "GET /metrics HTTP/1.0\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << ok;
  const std::string body = ok.substr(ok.find("\r\n\r\n") + 4);
  EXPECT_EQ(body, PrometheusText(SampleStats()));
  EXPECT_EQ(Http((*e)->port(), "GET /etc/passwd HTTP/1.0\r\n\r\n").rfind("HTTP/1.0 404", 0), 0u);
  EXPECT_EQ(Http((*e)->port(), "POST /metrics HTTP/1.0\r\n\r\n").rfind("HTTP/1.0 405", 0), 0u);
  // A client that sends nothing costs the server at most its 2 s, and is answered.
  EXPECT_EQ(Http((*e)->port(), "").rfind("HTTP/1.0 405", 0), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::ifstream in(dir / "epochfs.prom");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), PrometheusText(SampleStats()));
  EXPECT_FALSE(std::filesystem::exists(dir / "epochfs.prom.tmp"));
  EXPECT_GE(renders.load(), 3);  // first write, scrape, and at least one rewrite
  e->reset();
  EXPECT_FALSE(std::filesystem::exists(dir / "epochfs.prom")) << "removed on stop";
  std::filesystem::remove_all(dir);
}

// Idle connections (a port scanner, a stuck scraper, a hostile local user) never make a
// scrape wait: with one connection served at a time and a read timeout each, they made
// scrapes time out (docs/benchmarks.md, "Figures behind design choices").
TEST(MetricsExporter, IdleConnectionsDoNotDelayScrapes) {
  MetricsExporter::Options o;
  o.listen = "127.0.0.1:0";
  auto e = MetricsExporter::Start(o, [] { return PrometheusText(SampleStats()); });
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  std::vector<int> idle;
  for (int i = 0; i < 100; i++) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa {};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((*e)->port());
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    idle.push_back(fd);
  }
  for (int i = 0; i < 5; i++) {
    const auto start = std::chrono::steady_clock::now();
    const std::string reply = Http((*e)->port(), "GET /metrics HTTP/1.0\r\n\r\n");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(reply.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << reply;
    // A scrape's own work takes milliseconds; Prometheus's default timeout is 10 s. The
    // idle clients may hold every slot for up to their 2 s each, no longer.
    EXPECT_LT(seconds, 5.0) << "scrape " << i;
  }
  for (int fd : idle) ::close(fd);
}

TEST(MetricsExporter, TakenPortIsAnError) {
  MetricsExporter::Options o;
  o.listen = "127.0.0.1:0";
  auto first = MetricsExporter::Start(o, [] { return std::string(); });
  ASSERT_TRUE(first.ok());
  o.listen = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = MetricsExporter::Start(o, [] { return std::string(); });
  EXPECT_FALSE(second.ok());
}

}  // namespace
}  // namespace epochfs::daemon
