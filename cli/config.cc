#include "cli/config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "cli/option_table.h"
#include "fmt/format.h"
#include "toml++/toml.h"

namespace epochfs::cli {

using daemon::MountOptions;
using daemon::ParseSize;
namespace {

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

// Reads `v` as the value of `row` into `out`; returns why it was refused ("" when it
// was not). The caller adds file, line and key.
std::string ParseTomlValue(const OptionRow& row, const toml::node& v, OptionValue& out) {
  switch (row.type) {
    case OptionType::kBool:
      if (!v.is_boolean()) return fmt::format("expected true or false, got {}", TypeName(v));
      out.boolean = *v.value<bool>();
      return "";
    case OptionType::kSize: {
      if (v.is_integer()) {
        const int64_t n = *v.value<int64_t>();
        if (n < 0) return fmt::format("a size cannot be negative ({})", n);
        out.number = static_cast<uint64_t>(n);
      } else if (v.is_string()) {
        auto bytes = ParseSize(*v.value<std::string>());
        if (!bytes.ok()) return bytes.status().message();
        out.number = *bytes;
      } else {
        return fmt::format("expected a size such as \"8G\" or a number of bytes, got {}",
                           TypeName(v));
      }
      if (out.number < row.min || out.number > row.max) {
        return fmt::format("{} is outside {}..{}", out.number, FormatSize(row.min),
                           FormatSize(row.max));
      }
      return "";
    }
    case OptionType::kInteger: {
      if (!v.is_integer()) return fmt::format("expected an integer, got {}", TypeName(v));
      const int64_t n = *v.value<int64_t>();
      const auto lo = static_cast<int64_t>(row.min);
      if (row.max == UINT64_MAX) {
        if (n < lo) return fmt::format("{} is below {}", n, lo);
      } else if (n < lo || static_cast<uint64_t>(n) > row.max) {
        return fmt::format("{} is outside {}..{}", n, lo, row.max);
      }
      out.number = static_cast<uint64_t>(n);
      return "";
    }
    case OptionType::kSeconds: {
      if (!v.is_number()) return fmt::format("expected a number of seconds, got {}", TypeName(v));
      const double s = *v.value<double>();
      if (!(s >= 0 && s <= 86400)) return fmt::format("{} is outside 0..86400 seconds", s);
      out.seconds = s;
      return "";
    }
    case OptionType::kPath:
    case OptionType::kOneOf:
    case OptionType::kHostPort:
      break;
  }
  if (!v.is_string()) return fmt::format("expected a string, got {}", TypeName(v));
  out.text = *v.value<std::string>();
  switch (row.type) {
    case OptionType::kPath:
      if (out.text.empty()) return "expected a path, got an empty string";
      return "";
    case OptionType::kOneOf:
      if (std::find(row.choices.begin(), row.choices.end(), out.text) == row.choices.end()) {
        return fmt::format("\"{}\" is not one of {}", out.text, fmt::join(row.choices, ", "));
      }
      return "";
    case OptionType::kHostPort:
      if (out.text.find(':') == std::string::npos) return "expected HOST:PORT";
      return "";
    default:
      return "";
  }
}

}  // namespace

const std::set<std::string>& ConfigKeys() {
  static const std::set<std::string> keys = [] {
    std::set<std::string> k;
    for (const OptionRow& row : MountOptionTable()) {
      if (!row.toml_key.empty()) k.insert(row.toml_key);
    }
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
    const OptionRow* row = FindByTomlKey(key);
    if (row == nullptr) {
      return Status::InvalidArgument(fmt::format("{}:{}: key '{}': unknown key (known: {})",
                                                 filename, where.line, key,
                                                 fmt::join(ConfigKeys(), ", ")));
    }
    const toml::node& value = *table.get(key);
    OptionValue parsed;
    const std::string why = ParseTomlValue(*row, value, parsed);
    if (!why.empty()) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: key '{}': {}", filename, value.source().begin.line, key, why));
    }
    row->apply(parsed, options);
    if (set_keys) set_keys->insert(key);
  }
  return Status::Ok();
}

Status ApplyConfigFile(const std::filesystem::path& path, MountOptions& options,
                       std::set<std::string>* set_keys) {
  // An ifstream opens a directory and reads nothing from it: an empty config.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::InvalidArgument(
        fmt::format("config file {} is a directory (give the file inside it)", path.string()));
  }
  std::ifstream in(path);
  if (!in) return Status::FromErrno(errno, fmt::format("config file {}", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::IoError(fmt::format("config file {}: read failed", path.string()));
  return ApplyConfigText(text.str(), path.string(), options, set_keys);
}

}  // namespace epochfs::cli
