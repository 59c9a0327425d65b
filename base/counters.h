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
// its own family names, so dashboards do not break when a JSON key is added.
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
};

using CounterValue = std::variant<uint64_t, double, bool, std::string>;

using CounterVisitor = std::function<void(const CounterInfo& info, const CounterValue& value)>;

}  // namespace epochfs
