// The views for people, `epochfs status` and `epochfs top`, as rows of the counter
// registry (base/counters.h).
//
// The CLI runs in another process than the daemon and sees only its stats JSON. What
// each counter is and where it is shown (CounterInfo::display) come from the registry
// compiled into the CLI (daemon::VisitAllCounters); each value is looked up in the JSON
// by the counter's name. A counter the JSON lacks (an older daemon, a mount without
// readahead) is left out, never an error; a key this registry does not know (a newer
// daemon) is not shown. The mount's identity, `source` and `mountpoint`, heads each
// view and is on no row: the only keys read by name.
//
// Thread-safety: plain functions; ViewRows() is built once, on first use.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/counters.h"
#include "nlohmann/json.hpp"

namespace epochfs::cli {

// Rows start with their name in a column this wide (names are shorter).
inline constexpr int kRowNameWidth = 18;

struct ViewRow {
  std::string name;
  std::vector<CounterInfo> counters;  // in visit order
};

// Every counter but the identity, on its row; rows in the order of their first counter.
const std::vector<ViewRow>& ViewRows();

// The value of the counter `name` ("a" or "a/b") in `stats`, or null when it has none.
const nlohmann::json* FindCounter(const nlohmann::json& stats, const std::string& name);
// A value as a number, or nullopt when it is not one.
std::optional<double> NumberOf(const nlohmann::json* value);
// The mount's identity string `key` ("source", "mountpoint"), or "-".
std::string IdentityOf(const nlohmann::json& stats, const char* key);

// A value as a person reads it: "1.5 GiB", "42 s", "yes", a string ("-" when empty), a
// structure from a newer daemon as its JSON.
std::string ShowValue(const nlohmann::json& value, Unit unit);
// A number in `unit`, and a rate per second of it: "1.5 GiB", "1.5 GiB/s", "20/s".
std::string ShowNumber(double n, Unit unit);
std::string ShowRate(double per_second, Unit unit);

// "label value", or "value" for a counter labelled "".
std::string Labelled(const CounterInfo& counter, const std::string& value);

// Whether the value counts as nothing for CounterDisplay::quiet: 0, false, "".
bool IsQuiet(const nlohmann::json& value);

// Whether `counter` is a whole (CounterDisplay::of) that `stats` shows with its part.
bool ShownWithItsPart(const CounterInfo& counter, const nlohmann::json& stats);

// `counter` as the status table shows it: its value, "X of Y (Z%)" for a part of a
// whole, "X (Z%)" for one of its row's parts (but a quiet one), whose sum is `parts`.
std::string ShowCounter(const CounterInfo& counter, const nlohmann::json& value,
                        const nlohmann::json& stats, double parts);

}  // namespace epochfs::cli
