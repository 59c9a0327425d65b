#include "cli/mount_flags.h"

#include "CLI/CLI.hpp"

namespace epochfs::cli {

MountFlags::MountFlags(CLI::App* mount) {
  for (const OptionRow& row : MountOptionTable()) {
    if (row.flag.empty()) continue;
    Slot& slot = slots_.emplace_back();
    slot.row = &row;
    // Numbers are bound as numbers so CLI11 checks them and names their type in --help
    // ("UINT:UINT in [1 - 1024]"); sizes stay text, parsed by daemon::ParseSize below.
    switch (row.type) {
      case OptionType::kBool:
        slot.option = mount->add_flag(row.flag, slot.flag, row.help);
        break;
      case OptionType::kInteger:
        slot.option = mount->add_option(row.flag, slot.number, row.help);
        if (row.max == UINT64_MAX) {
          slot.option->check(CLI::NonNegativeNumber);
        } else {
          slot.option->check(CLI::Range(row.min, row.max));
        }
        break;
      case OptionType::kSeconds:
        slot.option =
            mount->add_option(row.flag, slot.seconds, row.help)->check(CLI::Range(0.0, 86400.0));
        break;
      case OptionType::kOneOf:
        slot.option = mount->add_option(row.flag, slot.text, row.help)->check(CLI::IsMember(row.choices));
        break;
      case OptionType::kSize:
      case OptionType::kPath:
      case OptionType::kHostPort:
        slot.option = mount->add_option(row.flag, slot.text, row.help);
        break;
    }
    if (!row.help_default.empty()) slot.option->default_str(row.help_default);
    if (!row.excludes.empty()) slot.option->excludes(mount->get_option(row.excludes));
  }
}

const MountFlags::Slot* MountFlags::Find(const std::string& flag) const {
  for (const Slot& slot : slots_) {
    if (slot.row->flag == flag) return &slot;
  }
  return nullptr;
}

std::string MountFlags::ConfigPath() const {
  const std::string& config = Find("--config")->text;
  return config.empty() ? Find("--config-if-exists")->text : config;
}

bool MountFlags::ConfigMayBeMissing() const { return Find("--config")->text.empty(); }

Status MountFlags::ApplyGiven(daemon::MountOptions& options) const {
  Status first_error = Status::Ok();
  for (const Slot& slot : slots_) {
    const OptionRow& row = *slot.row;
    if (row.apply == nullptr || slot.option->count() == 0) continue;
    OptionValue value;
    switch (row.type) {
      case OptionType::kBool:
        value.boolean = slot.flag != row.flag_turns_off;
        break;
      case OptionType::kSize: {
        // No range check here: the command line never had one (see OptionRow::min).
        auto bytes = daemon::ParseSize(slot.text);
        if (!bytes.ok()) {
          if (first_error.ok()) {
            first_error = Status::InvalidArgument(LongFlag(row) + ": " + bytes.status().message());
          }
          continue;
        }
        value.number = *bytes;
        break;
      }
      case OptionType::kInteger:
        value.number = slot.number;
        break;
      case OptionType::kSeconds:
        value.seconds = slot.seconds;
        break;
      case OptionType::kPath:
      case OptionType::kOneOf:
      case OptionType::kHostPort:
        value.text = slot.text;
        break;
    }
    row.apply(value, options);
  }
  return first_error;
}

}  // namespace epochfs::cli
