#include "cli/counter_view.h"

#include <cmath>
#include <map>

#include "cli/status.h"
#include "daemon/metrics.h"
#include "fmt/format.h"

namespace epochfs::cli {
namespace {

bool IsIdentity(const std::string& name) { return name == "source" || name == "mountpoint"; }

// The row of a counter nobody placed: the name up to its '/', or the name itself.
std::string RowOf(const CounterInfo& c) {
  if (c.display.row != nullptr) return c.display.row;
  return c.name.substr(0, c.name.find('/'));
}

std::vector<ViewRow> BuildRows() {
  std::vector<ViewRow> rows;
  std::map<std::string, size_t> index;
  daemon::VisitAllCounters([&](const CounterInfo& info, const CounterValue&) {
    if (IsIdentity(info.name)) return;
    const std::string row = RowOf(info);
    auto [it, added] = index.emplace(row, rows.size());
    if (added) rows.push_back({row, {}});
    rows[it->second].counters.push_back(info);
  });
  return rows;
}

// Which counter (by name) is shown as a part of each whole (CounterDisplay::of).
std::map<std::string, std::string> BuildPartOfWhole() {
  std::map<std::string, std::string> parts;
  for (const ViewRow& row : ViewRows()) {
    for (const CounterInfo& c : row.counters) {
      if (c.display.of != nullptr) parts[c.display.of] = c.name;
    }
  }
  return parts;
}

}  // namespace

const std::vector<ViewRow>& ViewRows() {
  static const std::vector<ViewRow> rows = BuildRows();
  return rows;
}

const nlohmann::json* FindCounter(const nlohmann::json& stats, const std::string& name) {
  const nlohmann::json* v = &stats;
  size_t start = 0;
  while (true) {
    const size_t slash = name.find('/', start);
    const std::string part = name.substr(start, slash == std::string::npos ? slash : slash - start);
    if (!v->is_object()) return nullptr;
    auto it = v->find(part);
    if (it == v->end()) return nullptr;
    v = &*it;
    if (slash == std::string::npos) return v;
    start = slash + 1;
  }
}

std::optional<double> NumberOf(const nlohmann::json* value) {
  if (value == nullptr || !value->is_number()) return std::nullopt;
  return value->get<double>();
}

std::string IdentityOf(const nlohmann::json& stats, const char* key) {
  const nlohmann::json* v = FindCounter(stats, key);
  return v != nullptr ? ShowValue(*v, Unit::kNumber) : "-";
}

std::string ShowNumber(double n, Unit unit) {
  switch (unit) {
    case Unit::kBytes:
      return FormatBytes(n);
    case Unit::kSeconds:
      return fmt::format("{:.0f} s", n);
    case Unit::kNumber:
      break;
  }
  // A fraction (a smoothed rate, a small rate per second) with one decimal while it
  // is small enough for that to matter.
  return n == std::floor(n) || std::fabs(n) >= 10 ? fmt::format("{:.0f}", n)
                                                  : fmt::format("{:.1f}", n);
}

std::string ShowRate(double per_second, Unit unit) {
  return ShowNumber(per_second, unit == Unit::kBytes ? unit : Unit::kNumber) + "/s";
}

std::string ShowValue(const nlohmann::json& value, Unit unit) {
  if (value.is_boolean()) return value.get<bool>() ? "yes" : "no";
  if (value.is_string()) return value.get<std::string>().empty() ? "-" : value.get<std::string>();
  // Exact as integers: a pid or a byte count must not go through a double.
  if (unit == Unit::kNumber && value.is_number_unsigned()) {
    return std::to_string(value.get<uint64_t>());
  }
  if (unit == Unit::kNumber && value.is_number_integer()) {
    return std::to_string(value.get<int64_t>());
  }
  if (value.is_number()) return ShowNumber(value.get<double>(), unit);
  if (value.is_null()) return "-";
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string Labelled(const CounterInfo& counter, const std::string& value) {
  std::string label;
  if (counter.display.label != nullptr) {
    label = counter.display.label;
  } else if (const size_t slash = counter.name.rfind('/'); slash != std::string::npos) {
    label = counter.name.substr(slash + 1);
  } else if (RowOf(counter) != counter.name) {
    label = counter.name;
  }
  return label.empty() ? value : label + " " + value;
}

bool IsQuiet(const nlohmann::json& value) {
  if (value.is_boolean()) return !value.get<bool>();
  if (value.is_string()) return value.get<std::string>().empty();
  if (value.is_number()) return value.get<double>() == 0;
  return value.is_null();
}

bool ShownWithItsPart(const CounterInfo& counter, const nlohmann::json& stats) {
  static const std::map<std::string, std::string> part_of_whole = BuildPartOfWhole();
  auto it = part_of_whole.find(counter.name);
  return it != part_of_whole.end() && FindCounter(stats, it->second) != nullptr;
}

std::string ShowCounter(const CounterInfo& counter, const nlohmann::json& value,
                        const nlohmann::json& stats, double parts) {
  const CounterDisplay& d = counter.display;
  std::string shown = ShowValue(value, d.unit);
  const std::optional<double> n = NumberOf(&value);
  if (d.of != nullptr && n) {
    const nlohmann::json* whole = FindCounter(stats, d.of);
    if (const std::optional<double> w = NumberOf(whole)) {
      shown += fmt::format(" of {} ({})", ShowValue(*whole, d.unit), FormatShare(*n, *w));
    }
  }
  // A quiet part is one kind of many (a FUSE request kind): its share says little.
  if (d.part && !d.quiet && n) shown += fmt::format(" ({})", FormatShare(*n, parts));
  return Labelled(counter, shown);
}

}  // namespace epochfs::cli
