#include "cli/top.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "cli/counter_view.h"
#include "cli/status.h"
#include "fmt/format.h"

namespace epochfs::cli {
namespace {

// How much counter `name` grew from `before` to `after`: 0 when it is new or went
// down (a daemon restarted between the snapshots).
double Growth(const nlohmann::json& before, const nlohmann::json& after, const std::string& name) {
  const double now = NumberOf(FindCounter(after, name)).value_or(0);
  const double then = NumberOf(FindCounter(before, name)).value_or(0);
  return now > then ? now - then : 0;
}

struct Part {
  const CounterInfo* counter;
  double growth, total;
};

// A row's parts (CounterDisplay::part) led by their sum per second and since mount:
// "20/s (40)", then each part's share over the interval and since mount, or, for quiet
// parts (request kinds), the three that grew most: "  (read 20/s, lookup 2/s)".
std::string ShowParts(std::vector<Part> parts, double secs) {
  double growth = 0, total = 0;
  for (const Part& p : parts) {
    growth += p.growth;
    total += p.total;
  }
  const Unit unit = parts.front().counter->display.unit;
  std::string out = fmt::format("{} ({})", ShowRate(growth / secs, unit), ShowNumber(total, unit));
  if (parts.front().counter->display.quiet) {
    std::stable_sort(parts.begin(), parts.end(),
                     [](const Part& x, const Part& y) { return x.growth > y.growth; });
    std::string busiest;
    for (size_t i = 0; i < parts.size() && i < 3 && parts[i].growth > 0; i++) {
      busiest += fmt::format("{}{}", i ? ", " : "  (",
                             Labelled(*parts[i].counter, ShowRate(parts[i].growth / secs, unit)));
    }
    return busiest.empty() ? out : out + busiest + ")";
  }
  for (const Part& p : parts) {
    out += ", " + Labelled(*p.counter, fmt::format("{} ({})", FormatShare(p.growth, growth),
                                                   FormatShare(p.total, total)));
  }
  return out;
}

}  // namespace

std::string TopFrame(const nlohmann::json& before, const nlohmann::json& after, double seconds) {
  const double secs = seconds > 0 ? seconds : 1;
  std::string out = fmt::format("epochfs top  {}  (source {})\n", IdentityOf(after, "mountpoint"),
                                IdentityOf(after, "source"));
  out += fmt::format("  {:<{}}per second over the last {:.1f} s (since mount)\n", "", kRowNameWidth,
                     secs);
  for (const ViewRow& row : ViewRows()) {
    std::vector<Part> parts;
    std::vector<std::string> items;
    bool any = false;
    for (const CounterInfo& c : row.counters) {
      const nlohmann::json* value = FindCounter(after, c.name);
      if (!c.display.top || value == nullptr) continue;
      any = true;
      const std::optional<double> n = NumberOf(value);
      if (c.display.part && n) {
        parts.push_back({&c, Growth(before, after, c.name), *n});
      } else if (c.kind == CounterKind::kCounter && n) {
        items.push_back(Labelled(
            c,
            fmt::format("{} ({})", ShowRate(Growth(before, after, c.name) / secs, c.display.unit),
                        ShowValue(*value, c.display.unit))));
      } else if (!(c.display.quiet && IsQuiet(*value)) && !ShownWithItsPart(c, after)) {
        items.push_back(ShowCounter(c, *value, after, 0));
      }
    }
    if (!any) continue;
    std::string line = parts.empty() ? "" : ShowParts(parts, secs);
    for (const std::string& item : items) line += (line.empty() ? "" : ", ") + item;
    out += fmt::format("  {:<{}}{}\n", row.name, kRowNameWidth, line.empty() ? "-" : line);
  }
  return out;
}

int RunTop(const TopOptions& options, const std::function<Result<nlohmann::json>()>& read_stats,
           FILE* out) {
  const bool tty = ::isatty(::fileno(out));
  auto before = read_stats();
  if (!before.ok()) {
    fmt::print(stderr, "epochfs: error: {}\n", before.status().message());
    return 2;
  }
  auto t0 = std::chrono::steady_clock::now();
  bool first = true;
  while (true) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options.interval_s));
    auto after = read_stats();
    const auto t1 = std::chrono::steady_clock::now();
    if (!after.ok()) {
      fmt::print(stderr, "epochfs: {}\n", after.status().message());
      return 1;
    }
    const std::string frame =
        TopFrame(*before, *after, std::chrono::duration<double>(t1 - t0).count());
    if (tty) {
      fmt::print(out, "\033[H\033[2J{}", frame);
    } else {
      fmt::print(out, "{}{}", first ? "" : "\n", frame);
    }
    std::fflush(out);
    first = false;
    if (options.once) return 0;
    before = std::move(after);
    t0 = t1;
  }
}

}  // namespace epochfs::cli
