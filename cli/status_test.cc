// `epochfs status` and `epochfs top` walk the counter registry: every counter it holds
// shows without a change to the commands, and a counter the snapshot lacks is left out.
#include "cli/status.h"

#include <gtest/gtest.h>

#include <string>

#include "cli/counter_view.h"
#include "cli/top.h"
#include "daemon/metrics.h"

namespace epochfs::cli {
namespace {

// Sets (or, with a null value, erases) the counter `name` ("a" or "a/b") in `j`.
void Put(nlohmann::json& j, const std::string& name, const nlohmann::json& value) {
  nlohmann::json* slot = &j;
  size_t start = 0;
  for (size_t slash; (slash = name.find('/', start)) != std::string::npos; start = slash + 1) {
    slot = &(*slot)[name.substr(start, slash - start)];
  }
  if (value.is_null()) {
    slot->erase(name.substr(start));
  } else {
    (*slot)[name.substr(start)] = value;
  }
}

// A snapshot with every counter of the registry, none 0, false or empty, so that even
// the quiet ones (CounterDisplay::quiet) show.
nlohmann::json FullSnapshot() {
  nlohmann::json j = nlohmann::json::object();
  uint64_t n = 0;
  daemon::VisitAllCounters([&](const CounterInfo& info, const CounterValue&) {
    n++;
    switch (info.kind) {
      case CounterKind::kText:
        Put(j, info.name, "text" + std::to_string(n));
        break;
      case CounterKind::kFlag:
        Put(j, info.name, true);
        break;
      default:
        Put(j, info.name, n * 1000 + n);
    }
  });
  return j;
}

std::vector<CounterInfo> Registry() {
  std::vector<CounterInfo> all;
  daemon::VisitAllCounters(
      [&](const CounterInfo& info, const CounterValue&) { all.push_back(info); });
  return all;
}

// The registry is all the table knows: a counter added to it (with or without a
// place, CounterInfo::display) is in the table, as this finds by taking each one
// away in turn.
TEST(Status, TableShowsEveryCounterOfTheRegistry) {
  const nlohmann::json full = FullSnapshot();
  const std::string table = StatusTable(full);
  for (const ViewRow& row : ViewRows()) {
    EXPECT_LT(row.name.size(), size_t{kRowNameWidth}) << row.name << ": too long a row name";
  }
  for (const CounterInfo& c : Registry()) {
    nlohmann::json without = full;
    Put(without, c.name, nullptr);
    EXPECT_NE(StatusTable(without), table) << c.name << " does not show in\n" << table;
  }
}

TEST(Status, TopShowsEveryCounterMarkedForIt) {
  const nlohmann::json full = FullSnapshot();
  const std::string frame = TopFrame(nlohmann::json::object(), full, 2.0);
  size_t shown = 0;
  for (const CounterInfo& c : Registry()) {
    if (!c.display.top) continue;
    shown++;
    nlohmann::json without = full;
    Put(without, c.name, nullptr);
    EXPECT_NE(TopFrame(nlohmann::json::object(), without, 2.0), frame)
        << c.name << " does not show in\n"
        << frame;
  }
  EXPECT_GT(shown, 20u);
}

// An older daemon lacks counters, a newer one may change a type: never a crash, and
// what is missing is left out.
TEST(Status, MissingAndOddValuesAreLeftOutOrShownAsTheyAre) {
  EXPECT_EQ(StatusTable(nlohmann::json::object()), "epochfs - on -\n");
  const auto odd = nlohmann::json::parse(
      R"({"mountpoint": "/m", "ram_hits": "many", "misses": null, "ram_bytes": 5,
          "pattern": {"kind": "shuffled"}, "requests": 7})");
  const std::string table = StatusTable(odd);
  EXPECT_NE(table.find("RAM hits many"), std::string::npos) << table;
  EXPECT_NE(table.find("5 B"), std::string::npos) << table;  // no budget: no "of"
  EXPECT_NE(table.find(R"({"kind":"shuffled"})"), std::string::npos) << table;
  EXPECT_EQ(table.find("SSD tier"), std::string::npos) << table;
  EXPECT_NO_THROW(TopFrame(odd, nlohmann::json::parse(R"({"ram_hits": -3, "requests": []})"), 0));
}

TEST(Status, TableRowsCombineCountersAsTheRegistrySays) {
  const auto stats = nlohmann::json::parse(R"({
    "source": "/s", "mountpoint": "/m", "ram_hits": 30, "ssd_hits": 10, "misses": 0,
    "ram_bytes": 536870912, "ram_budget_bytes": 1073741824, "ram_entries": 3,
    "requests": {"lookup": 14, "read": 40, "open": 0}, "request_errors": 1,
    "ssd_degraded": false, "ssd_degraded_reason": "", "uptime_s": 41.7})");
  const std::string table = StatusTable(stats);
  EXPECT_EQ(table.rfind("epochfs /s on /m\n", 0), 0u) << table;
  EXPECT_NE(table.find("RAM hits 30 (75.0%), SSD hits 10 (25.0%), misses 0 (0.0%)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("512.0 MiB of 1.0 GiB (50.0%), entries 3"), std::string::npos) << table;
  EXPECT_NE(table.find("requests          lookup 14, read 40, errors 1\n"), std::string::npos)
      << table;
  EXPECT_NE(table.find("up 42 s"), std::string::npos) << table;
  // Quiet: the SSD tier's row is there, without "DEGRADED" while it is not.
  EXPECT_NE(table.find("  SSD tier          -\n"), std::string::npos) << table;
  EXPECT_EQ(table.find("DEGRADED"), std::string::npos) << table;
}

TEST(Status, ACounterNobodyPlacedIsLabelledWithItsName) {
  EXPECT_EQ(Labelled(CounterInfo{"new_things", "New things.", CounterKind::kCounter}, "5"), "5");
  EXPECT_EQ(Labelled(CounterInfo{"family/kind", "Kinds.", CounterKind::kCounter}, "5"), "kind 5");
  EXPECT_EQ(ShowValue(nlohmann::json(uint64_t{1} << 60), Unit::kNumber),
            "1152921504606846976");  // exact, not through a double
  EXPECT_EQ(ShowValue(nlohmann::json(1536), Unit::kBytes), "1.5 KiB");
  EXPECT_EQ(ShowRate(0.5, Unit::kNumber), "0.5/s");
}

}  // namespace
}  // namespace epochfs::cli
