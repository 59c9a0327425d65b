#include "cli/config.h"

#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "fmt/format.h"
#include "toml++/toml.h"

namespace epochfs::cli {

using daemon::Consistency;
using daemon::MountOptions;
using daemon::ParseSize;
using fs::FuseTimeouts;
namespace {

// Why a value was refused; the caller adds file, line and key.
using Setter = std::function<std::string(const toml::node&, MountOptions&)>;

std::string TypeName(const toml::node& v) {
  switch (v.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a number";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date or time";
  }
}

Setter String(std::function<std::string(const std::string&, MountOptions&)> set) {
  return [set](const toml::node& v, MountOptions& o) -> std::string {
    if (!v.is_string()) return fmt::format("expected a string, got {}", TypeName(v));
    return set(*v.value<std::string>(), o);
  };
}

Setter Path(std::filesystem::path MountOptions::*field) {
  return String([field](const std::string& s, MountOptions& o) -> std::string {
    if (s.empty()) return "expected a path, got an empty string";
    o.*field = s;
    return "";
  });
}

Setter Bool(bool MountOptions::*field, bool invert = false) {
  return [field, invert](const toml::node& v, MountOptions& o) -> std::string {
    if (!v.is_boolean()) return fmt::format("expected true or false, got {}", TypeName(v));
    o.*field = *v.value<bool>() != invert;
    return "";
  };
}

// A size: "8G"-style string, or a plain integer of bytes.
// An integer in lo..hi (INT64_MAX: no upper bound).
Setter Integer(int64_t lo, int64_t hi, std::function<void(int64_t, MountOptions&)> set) {
  return [lo, hi, set](const toml::node& v, MountOptions& o) -> std::string {
    if (!v.is_integer()) return fmt::format("expected an integer, got {}", TypeName(v));
    const int64_t n = *v.value<int64_t>();
    if (n < lo || n > hi) {
      return hi == INT64_MAX ? fmt::format("{} is below {}", n, lo)
                             : fmt::format("{} is outside {}..{}", n, lo, hi);
    }
    set(n, o);
    return "";
  };
}

Setter Size(std::function<void(uint64_t, MountOptions&)> set) {
  return [set](const toml::node& v, MountOptions& o) -> std::string {
    if (v.is_integer()) {
      const int64_t n = *v.value<int64_t>();
      if (n < 0) return fmt::format("a size cannot be negative ({})", n);
      set(static_cast<uint64_t>(n), o);
      return "";
    }
    if (!v.is_string()) {
      return fmt::format("expected a size such as \"8G\" or a number of bytes, got {}",
                         TypeName(v));
    }
    auto bytes = ParseSize(*v.value<std::string>());
    if (!bytes.ok()) return bytes.status().message();
    set(*bytes, o);
    return "";
  };
}

Setter Seconds(double FuseTimeouts::*field) {
  return [field](const toml::node& v, MountOptions& o) -> std::string {
    if (!v.is_number()) return fmt::format("expected a number of seconds, got {}", TypeName(v));
    const double s = *v.value<double>();
    if (!(s >= 0 && s <= 86400)) return fmt::format("{} is outside 0..86400 seconds", s);
    o.timeouts.*field = s;
    return "";
  };
}

Setter OneOf(std::vector<std::string> allowed,
             std::function<void(const std::string&, MountOptions&)> set) {
  return String([allowed, set](const std::string& s, MountOptions& o) -> std::string {
    for (const auto& a : allowed) {
      if (a == s) {
        set(s, o);
        return "";
      }
    }
    return fmt::format("\"{}\" is not one of {}", s, fmt::join(allowed, ", "));
  });
}

const std::map<std::string, Setter>& Setters() {
  static const std::map<std::string, Setter> setters = {
      {"source", Path(&MountOptions::source)},
      {"mountpoint", Path(&MountOptions::mountpoint)},
      {"cache_dir", Path(&MountOptions::cache_dir)},
      {"log_file", Path(&MountOptions::log_file)},
      {"ram", Size([](uint64_t n, MountOptions& o) { o.ram_budget = n; })},
      {"disk", Size([](uint64_t n, MountOptions& o) {
         o.disk_budget = n;
         o.disk_budget_set = true;
       })},
      {"chunk_size",
       [](const toml::node& v, MountOptions& o) -> std::string {
         uint64_t n = 0;
         std::string why = Size([&](uint64_t b, MountOptions&) { n = b; })(v, o);
         if (!why.empty()) return why;
         if (n < 4096 || n > (1u << 30)) return fmt::format("{} is outside 4K..1G", n);
         o.chunk_size = static_cast<uint32_t>(n);
         return "";
       }},
      {"readahead", Size([](uint64_t n, MountOptions& o) { o.readahead = n; })},
      {"prefetch", Integer(0, 64, [](int64_t n, MountOptions& o) {
         o.prefetch_threads = static_cast<uint32_t>(n);
       })},
      {"prefetch_iops", Integer(0, INT64_MAX, [](int64_t n, MountOptions& o) {
         o.prefetch_iops = static_cast<uint64_t>(n);
       })},
      {"prefetch_pacing", Bool(&MountOptions::prefetch_pacing)},
      {"prefetch_bandwidth", Size([](uint64_t n, MountOptions& o) { o.prefetch_bandwidth = n; })},
      {"read_only", Bool(&MountOptions::read_only)},
      {"allow_other", Bool(&MountOptions::allow_other)},
      {"io_uring", Bool(&MountOptions::use_io_uring)},
      {"log_level", OneOf({"trace", "debug", "info", "warn", "error", "off"},
                          [](const std::string& s, MountOptions& o) { o.log_level = s; })},
      {"consistency", OneOf({"auto", "open", "notify"},
                            [](const std::string& s, MountOptions& o) {
                              o.consistency = s == "open"     ? Consistency::kOpen
                                              : s == "notify" ? Consistency::kNotify
                                                              : Consistency::kAuto;
                            })},
      {"attr_timeout", Seconds(&FuseTimeouts::attr_s)},
      {"entry_timeout", Seconds(&FuseTimeouts::entry_s)},
      {"threads", Integer(1, 1024, [](int64_t n, MountOptions& o) {
         o.max_threads = static_cast<unsigned>(n);
       })},
      {"metrics_listen", String([](const std::string& s, MountOptions& o) -> std::string {
         if (s.find(':') == std::string::npos) return "expected HOST:PORT";
         o.metrics_listen = s;
         return "";
       })},
      {"metrics_allow_remote", Bool(&MountOptions::metrics_allow_remote)},
      {"metrics_textfile", Path(&MountOptions::metrics_textfile)},
  };
  return setters;
}

}  // namespace

const std::set<std::string>& ConfigKeys() {
  static const std::set<std::string> keys = [] {
    std::set<std::string> k;
    for (const auto& [name, setter] : Setters()) k.insert(name);
    return k;
  }();
  return keys;
}

Status ApplyConfigText(const std::string& text, const std::string& filename, MountOptions& options,
                       std::set<std::string>* set_keys) {
  toml::table table;
  try {
    table = toml::parse(text, filename);
  } catch (const toml::parse_error& e) {
    return Status::InvalidArgument(fmt::format("{}:{}:{}: {}", filename, e.source().begin.line,
                                               e.source().begin.column, e.description()));
  }
  // Keys in file order, so the first error reported is the first in the file.
  std::vector<std::pair<toml::source_position, std::string>> keys;
  for (auto&& [key, value] : table) {
    keys.emplace_back(key.source().begin, std::string(key.str()));
  }
  std::sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) {
    return a.first.line != b.first.line ? a.first.line < b.first.line
                                        : a.first.column < b.first.column;
  });
  for (const auto& [where, key] : keys) {
    const auto& setters = Setters();
    auto it = setters.find(key);
    if (it == setters.end()) {
      return Status::InvalidArgument(fmt::format("{}:{}: key '{}': unknown key (known: {})",
                                                 filename, where.line, key,
                                                 fmt::join(ConfigKeys(), ", ")));
    }
    const toml::node& value = *table.get(key);
    const std::string why = it->second(value, options);
    if (!why.empty()) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: key '{}': {}", filename, value.source().begin.line, key, why));
    }
    if (set_keys) set_keys->insert(key);
  }
  return Status::Ok();
}

Status ApplyConfigFile(const std::filesystem::path& path, MountOptions& options,
                       std::set<std::string>* set_keys) {
  std::ifstream in(path);
  if (!in) return Status::FromErrno(errno, fmt::format("config file {}", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::IoError(fmt::format("config file {}: read failed", path.string()));
  return ApplyConfigText(text.str(), path.string(), options, set_keys);
}

}  // namespace epochfs::cli
