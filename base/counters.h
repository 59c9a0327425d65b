// Counters: how each layer names what it counts, once, for every reader.
//
// A layer that counts something (the cache, the prefetcher, the FUSE request counters,
// the change watcher, the mount itself) implements
//
//   void VisitCounters(const CounterVisitor& visit) const;
//
// calling `visit(info, value)` once per counter, in the manner of CacheLib navy's
// counter visitor. The stats snapshot (.epochfs/stats, `epochfs status --json`) and the
// Prometheus text (daemon/metrics.h) are built by walking those visits, so adding a
// counter is one line in the layer that owns it. `info` says what the counter is and
// whether Prometheus exports it: the exporter deliberately exports a fixed subset, under
// its own family names, so dashboards do not break when a JSON key is added. `epochfs
// status` and `epochfs top` run in another process and read the JSON, but walk the
// same registry to know what to show and how (CounterInfo::display, cli/counter_view.h).
//
// Thread-safety: plain types; a visit runs on the caller's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <variant>

namespace epochfs {

enum class CounterKind {
  kCounter,  // only goes up (Prometheus "counter")
  kGauge,    // a level that goes up and down: bytes held, a rate, a limit
  kFlag,     // true/false (Prometheus: a gauge of 0 or 1)
  kText,     // a string: a path, a version, a reason; never exported to Prometheus
};

// How a person reads a counter's value.
enum class Unit : uint8_t {
  kNumber,   // as it is: "42", "2.5"
  kBytes,    // "1.5 GiB"
  kSeconds,  // "42 s"
};

// Where the views for people, `epochfs status` and `epochfs top`, show a counter. A
// view is a list of rows; a row gathers, in visit order, the counters that name it,
// each shown as "label value" ("RAM tier  1.0 GiB of 2.0 GiB (50.0%), entries 812").
// The defaults suit a counter nobody placed: a row of its own, labelled with its name
// ("requests/read" goes to a row "requests" as "read"), so a new counter shows up in
// `epochfs status` without a change to the command.
struct CounterDisplay {
  const char* row = nullptr;  // nullptr: the name up to its '/', or the whole name
  // nullptr: the name after its '/', none on a row of its own, else the name; "": none.
  const char* label = nullptr;
  Unit unit = Unit::kNumber;
  // The counter (by name) this one is a part of, a budget or a limit: shown as "X of Y
  // (Z%)", and the whole is then not shown on its own.
  const char* of = nullptr;
  // One of the parts its row splits a whole into (RAM hits, SSD hits and misses of the
  // chunk reads): shown with its share of the parts' sum; `top` leads the row with the
  // sum per second.
  bool part = false;
  // Left out while 0, false or empty: a kind that mostly stays unused (FUSE requests
  // by kind), or a state worth a word only when it holds (degraded). Quiet parts show
  // no share (one kind of many says little); `top` shows the three that moved most.
  bool quiet = false;
  bool top = false;  // `epochfs top` shows it too (`status` shows every counter)
};

struct CounterInfo {
  // A constructor rather than an aggregate: most counters give no Prometheus name or
  // labels, and `{name, help, kind}` then reads as the whole description.
  CounterInfo(std::string name, const char* help, CounterKind kind,
              const char* prometheus = nullptr, std::string labels = {})
      : name(std::move(name)),
        help(help),
        kind(kind),
        prometheus(prometheus),
        labels(std::move(labels)) {}

  // The stats JSON key. A '/' nests it: "requests/read" is {"requests": {"read": N}}.
  std::string name;
  const char* help;  // one sentence; for an exported counter, its family's # HELP
  CounterKind kind;
  // The Prometheus family this counter is a sample of; nullptr: not exported. Samples
  // that share a family (RAM and SSD hits) share its help text and differ by label.
  const char* prometheus;
  std::string labels;  // extra labels of the sample, `tier="ram"`; empty for none
  CounterDisplay display;

  // Places the counter in the views for people: `visit(CounterInfo{...}.Show({.row =
  // "RAM tier", .label = "entries"}), n)`. On the temporary, so a visit stays one call.
  CounterInfo&& Show(const CounterDisplay& d) && {
    display = d;
    return std::move(*this);
  }
};

using CounterValue = std::variant<uint64_t, double, bool, std::string>;

using CounterVisitor = std::function<void(const CounterInfo& info, const CounterValue& value)>;

}  // namespace epochfs
