#include "prefetcher/plan_parser.h"

#include <fmt/format.h>

namespace epochfs::prefetch {

Status PlanParser::CheckPath(std::string_view path, size_t max_line) {
  if (path.size() > max_line) {
    return Status::InvalidArgument(fmt::format("a path of {} bytes (at most {})", path.size(), max_line));
  }
  if (path.find('\0') != std::string_view::npos) return Status::InvalidArgument("NUL byte in a path");
  if (path.front() == '/') return Status::InvalidArgument(fmt::format("'{}' is absolute", path));
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return Status::InvalidArgument(
          fmt::format("'{}': empty, '.' or '..' path component", path.substr(0, 256)));
    }
    start = end + 1;
  }
  return Status::Ok();
}

Status PlanParser::Fail(Status status) {
  state_ = State::kFailed;
  partial_.clear();
  partial_.shrink_to_fit();
  entries_.clear();
  entries_.shrink_to_fit();
  entry_bytes_ = 0;
  return status;
}

Status PlanParser::Line(std::string_view line, const Resolve& resolve,
                        std::optional<std::vector<PlannedFile>>* published) {
  switch (state_) {
    case State::kHeader:
      if (line != kHeader) {
        return Fail(Status::InvalidArgument(
            fmt::format("plan must start with the line '{}'", kHeader)));
      }
      state_ = State::kEntries;
      return Status::Ok();
    case State::kEntries: {
      if (line.empty()) {
        *published = std::move(entries_);
        entries_ = {};
        state_ = State::kDone;
        return Status::Ok();
      }
      if (entries_.size() >= options_.max_entries) {
        return Fail(Status::InvalidArgument(
            fmt::format("plan has more than {} entries", options_.max_entries)));
      }
      entry_bytes_ += kBytesPerPlanEntry + line.size();
      if (options_.max_bytes != 0 && entry_bytes_ > options_.max_bytes) {
        return Fail(Status::InvalidArgument(fmt::format(
            "plan exceeds its memory bound of {} MiB after {} entries (a sixteenth of --ram)",
            options_.max_bytes >> 20, entries_.size())));
      }
      if (Status st = CheckPath(line, options_.max_line); !st.ok()) {
        return Fail(Status::InvalidArgument(
            fmt::format("plan line {}: {}", entries_.size() + 2, st.message())));
      }
      auto file = resolve(std::string(line));
      if (!file.ok()) {
        std::string why =
            fmt::format("plan line {}: {}", entries_.size() + 2, file.status().message());
        // "You may not read it" stays a permission error (its message says so already);
        // everything else is a bad plan.
        if (file.status().code() == Code::kPermission) {
          return Fail(Status(Code::kPermission, std::move(why), EACCES));
        }
        return Fail(Status::InvalidArgument(std::move(why)));
      }
      entries_.push_back(std::move(*file));
      return Status::Ok();
    }
    case State::kDone:
      return Fail(Status::InvalidArgument("data after the end of the plan (its empty line)"));
    case State::kIdle:
    case State::kFailed:
      break;
  }
  return Fail(Status::InvalidArgument("plan not started"));
}

Status PlanParser::Write(uint64_t offset, std::string_view data, const Resolve& resolve,
                         std::optional<std::vector<PlannedFile>>* published) {
  if (offset == 0) {
    state_ = State::kHeader;
    partial_.clear();
    entries_.clear();
    entry_bytes_ = 0;
    next_offset_ = 0;
  } else if (state_ == State::kFailed || state_ == State::kIdle) {
    return Status::InvalidArgument("plan refused earlier: write a new one from offset 0");
  } else if (offset != next_offset_) {
    return Fail(Status::InvalidArgument(
        fmt::format("plan write at offset {}, expected {}", offset, next_offset_)));
  }
  next_offset_ = offset + data.size();
  if (state_ == State::kDone && !data.empty()) {
    return Fail(Status::InvalidArgument("data after the end of the plan (its empty line)"));
  }
  if (data.find('\0') != std::string_view::npos) {
    return Fail(Status::InvalidArgument("NUL byte in the plan"));
  }
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      if (partial_.size() + data.size() > options_.max_line) {
        return Fail(Status::InvalidArgument(
            fmt::format("plan line longer than {} bytes", options_.max_line)));
      }
      partial_.append(data);
      break;
    }
    Status st;
    if (partial_.empty()) {
      st = Line(data.substr(0, nl), resolve, published);
    } else {
      partial_.append(data.substr(0, nl));
      st = Line(partial_, resolve, published);
      partial_.clear();
    }
    if (!st.ok()) return st;
    data.remove_prefix(nl + 1);
  }
  return Status::Ok();
}

}  // namespace epochfs::prefetch
