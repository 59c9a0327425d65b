// The counter registry: every counter the snapshot holds has one unique name, reaches
// the JSON, and, where it names a Prometheus family, reaches the Prometheus text.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "base/counters.h"
#include "daemon/metrics.h"

namespace epochfs::daemon {
namespace {

struct Visited {
  CounterInfo info;
  CounterValue value;
};

std::vector<Visited> AllCounters() {
  std::vector<Visited> all;
  VisitAllCounters([&](const CounterInfo& info, const CounterValue& value) {
    all.push_back({info, value});
  });
  return all;
}

// The JSON value at "a" or "a/b", or null.
const nlohmann::json* At(const nlohmann::json& j, const std::string& name) {
  const nlohmann::json* v = &j;
  size_t start = 0;
  while (true) {
    const size_t slash = name.find('/', start);
    const std::string part = name.substr(start, slash == std::string::npos ? slash : slash - start);
    if (!v->is_object() || !v->contains(part)) return nullptr;
    v = &(*v)[part];
    if (slash == std::string::npos) return v;
    start = slash + 1;
  }
}

TEST(Counters, NamesAreUniqueAndDescribed) {
  std::set<std::string> names;
  std::set<std::string> samples;  // family{labels}
  for (const Visited& c : AllCounters()) {
    EXPECT_TRUE(names.insert(c.info.name).second) << "duplicate counter " << c.info.name;
    EXPECT_FALSE(std::string(c.info.help).empty()) << c.info.name;
    if (c.info.prometheus != nullptr) {
      EXPECT_NE(c.info.kind, CounterKind::kText) << c.info.name << ": text is never exported";
      EXPECT_TRUE(samples.insert(std::string(c.info.prometheus) + "{" + c.info.labels + "}").second)
          << "two counters feed the sample " << c.info.prometheus << "{" << c.info.labels << "}";
    }
  }
  EXPECT_GT(names.size(), 100u);
}

TEST(Counters, SamplesOfAFamilyAgreeOnHelpAndType) {
  std::map<std::string, std::pair<std::string, bool>> families;  // help, is a counter
  for (const Visited& c : AllCounters()) {
    if (c.info.prometheus == nullptr) continue;
    const auto mine = std::make_pair(std::string(c.info.help), c.info.kind == CounterKind::kCounter);
    auto [it, added] = families.emplace(c.info.prometheus, mine);
    EXPECT_EQ(it->second, mine) << c.info.name << " disagrees with its family "
                                << c.info.prometheus;
  }
  EXPECT_EQ(families.size(), 31u);  // with epochfs_info, the 32 families of the interface
}

TEST(Counters, EveryCounterReachesTheJsonAndEveryExportedOneThePrometheusText) {
  MountCounters counters;
  counters.prefetch.emplace();
  counters.mountpoint = "/m";
  const nlohmann::json json = StatsSnapshotJson(counters);
  const std::string text = PrometheusText(json);
  size_t leaves = 0;
  for (const Visited& c : AllCounters()) {
    const nlohmann::json* v = At(json, c.info.name);
    ASSERT_NE(v, nullptr) << c.info.name << " is not in the snapshot";
    leaves++;
    if (c.info.prometheus == nullptr) continue;
    const std::string family = c.info.prometheus;
    EXPECT_NE(text.find("# TYPE " + family + " "), std::string::npos) << family;
    const std::string sample = family + "{mountpoint=\"/m\"" +
                               (c.info.labels.empty() ? "" : "," + c.info.labels) + "} ";
    EXPECT_NE(text.find("\n" + sample), std::string::npos) << sample << " missing:\n" << text;
  }
  // Nothing in the snapshot that no counter named.
  size_t json_leaves = 0;
  for (const auto& [key, value] : json.items()) {
    json_leaves += value.is_object() ? value.size() : 1;
  }
  EXPECT_EQ(json_leaves, leaves);
}

TEST(Counters, WithoutAPrefetcherItsKeysAreAbsent) {
  const nlohmann::json json = StatsSnapshotJson(MountCounters{});
  EXPECT_FALSE(json.contains("pattern"));
  EXPECT_FALSE(json.contains("prefetch_threads"));
  EXPECT_TRUE(json.contains("prefetch_from_ssd"));  // the cache's, always there
  EXPECT_TRUE(json["requests"].contains("lookup"));
  EXPECT_EQ(json["watched_dirs"], 0);
}

}  // namespace
}  // namespace epochfs::daemon
