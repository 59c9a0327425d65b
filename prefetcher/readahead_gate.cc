#include "prefetcher/readahead_gate.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>

namespace epochfs::prefetch {
namespace {

// The busy fraction of all CPUs since the last call, from /proc/stat's "cpu" line
// (busy: everything but idle and iowait). 0 when it cannot be read: no saturation seen.
std::function<double()> ProcStatBusy() {
  struct Last {
    uint64_t busy = 0, total = 0;
  };
  auto last = std::make_shared<Last>();
  return [last]() -> double {
    std::FILE* f = std::fopen("/proc/stat", "re");
    if (f == nullptr) return 0;
    std::array<unsigned long long, 8> v{};
    const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                              &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
    std::fclose(f);
    if (n < 5) return 0;
    uint64_t total = 0;
    for (int i = 0; i < n; ++i) total += v[i];
    const uint64_t busy = total - v[3] - v[4];  // less idle and iowait
    const uint64_t dt = total - last->total, db = busy - last->busy;
    const bool first = last->total == 0;
    last->busy = busy;
    last->total = total;
    if (first || dt == 0) return 0;
    return static_cast<double>(db) / static_cast<double>(dt);
  };
}

}  // namespace

const char* GateStateName(ReadaheadGate::State state) {
  switch (state) {
    case ReadaheadGate::State::kOn:
      return "on";
    case ReadaheadGate::State::kPaused:
      return "probing (paused)";
    case ReadaheadGate::State::kOff:
      return "off";
    case ReadaheadGate::State::kTrying:
      return "probing (trying)";
  }
  return "?";
}

ReadaheadGate::ReadaheadGate(std::function<double()> cpu_busy,
                             std::function<Clock::time_point()> now)
    : cpu_busy_(cpu_busy ? std::move(cpu_busy) : ProcStatBusy()),
      now_(std::move(now)),
      period_start_(now_()),
      depth_changed_(period_start_),
      phase_start_(period_start_),
      last_hit_(period_start_),
      measure_start_(period_start_),
      next_probe_(period_start_),
      on_hold_(kFirstHold),
      off_hold_(kOffHold) {}

double ReadaheadGate::Rate(uint64_t accesses, Clock::duration over) {
  const double seconds = std::chrono::duration<double>(over).count();
  return seconds > 0 ? static_cast<double>(accesses) / seconds : 0;
}

void ReadaheadGate::DecideLocked(Clock::time_point now, bool gained) {
  if (gained) {
    state_ = State::kOn;
    next_probe_ = now + on_hold_;
    on_hold_ = std::min<Clock::duration>(kMaxHold, 2 * on_hold_);
    off_hold_ = kOffHold;
  } else {
    if (state_ == State::kPaused) ++offs_;
    state_ = State::kOff;
    next_probe_ = now + off_hold_;
    off_hold_ = std::min<Clock::duration>(kMaxHold, 2 * off_hold_);
    on_hold_ = kFirstHold;
  }
  measuring_ = false;
  rate_periods_ = saturated_periods_ = late_periods_ = 0;
  period_start_ = now;
  period_accesses_ = period_hits_ = period_overtaken_ = 0;
}

void ReadaheadGate::EndPeriodLocked(Clock::time_point now) {
  const double rate = Rate(period_accesses_, now - period_start_);
  const bool active = period_accesses_ >= kMinAccesses;
  const bool late = period_hits_ + period_overtaken_ >= kMinAccesses / 2 &&
                    period_overtaken_ >= period_hits_ && now - depth_changed_ >= 2 * kPeriod;
  const double busy = cpu_busy_();
  period_start_ = now;
  period_accesses_ = period_hits_ = period_overtaken_ = 0;
  if (epoch_start_) {  // the readers starting up: not their rate
    epoch_start_ = !active;
    return;
  }
  last_rates_[0] = last_rates_[1];
  last_rates_[1] = rate;
  rate_periods_ = active ? rate_periods_ + 1 : 0;
  saturated_periods_ = active && busy >= kBusy ? saturated_periods_ + 1 : 0;
  late_periods_ = active && late ? late_periods_ + 1 : 0;
  if (rate_periods_ < 2 || now < next_probe_) return;
  const double reference = (last_rates_[0] + last_rates_[1]) / 2;
  if (state_ == State::kOn && (saturated_periods_ >= kSaturatedPeriods || late_periods_ >= 2)) {
    // Suspect: pause, and see whether the readers are any slower without it.
    state_ = State::kPaused;
  } else if (state_ == State::kOff) {
    state_ = State::kTrying;  // has it started to pay?
  } else {
    return;
  }
  ++probes_;
  reference_rate_ = reference;
  probe_late_ = late_periods_ >= 2;
  saturated_periods_ = late_periods_ = 0;
  phase_start_ = last_hit_ = now;
  measuring_ = false;
}

void ReadaheadGate::AdvanceLocked(Clock::time_point now) {
  if (state_ == State::kOn || state_ == State::kOff) {
    if (now - period_start_ >= 8 * kPeriod) {  // nothing heard for long: start afresh
      period_start_ = now;
      period_accesses_ = period_hits_ = period_overtaken_ = 0;
      rate_periods_ = saturated_periods_ = late_periods_ = 0;
    } else if (now - period_start_ >= kPeriod) {
      EndPeriodLocked(now);
    }
    return;
  }
  if (!measuring_) {
    const bool ready = state_ == State::kPaused
                           ? now - last_hit_ >= kDrainQuiet || now - phase_start_ >= kMaxDrain
                           : now - phase_start_ >= kWarmUp;
    if (ready) {
      measuring_ = true;
      measure_start_ = now;
      measure_accesses_ = 0;
    }
    return;
  }
  if (now - measure_start_ < kMeasure) return;
  const double rate = Rate(measure_accesses_, now - measure_start_);
  // Paused: the reference is the rate with readahead; trying: the rate without it.
  bool gained;
  if (state_ == State::kTrying) {
    gained = rate >= kGain * reference_rate_;
  } else if (probe_late_) {
    gained = reference_rate_ >= kGain * rate;
  } else {
    gained = rate < kHarm * reference_rate_;
  }
  DecideLocked(now, gained);
}

bool ReadaheadGate::OnAccess(Access access) {
  MutexLock lock(mu_);
  const Clock::time_point now = now_();
  const bool was_allowed = state_ == State::kOn || state_ == State::kTrying;
  AdvanceLocked(now);
  ++period_accesses_;
  if (access == Access::kHit) {
    ++period_hits_;
    last_hit_ = now;
  } else if (access == Access::kOvertaken) {
    ++period_overtaken_;
    ++overtaken_;
  }
  if (measuring_) ++measure_accesses_;
  const bool allowed = state_ == State::kOn || state_ == State::kTrying;
  return allowed && !was_allowed;
}

void ReadaheadGate::OnNewEpoch() {
  MutexLock lock(mu_);
  const Clock::time_point now = now_();
  // A probe across an epoch's end compares two epochs: dropped, and the state it left
  // holds until this epoch's rate is known.
  if (state_ == State::kPaused) {
    state_ = State::kOn;
  } else if (state_ == State::kTrying) {
    state_ = State::kOff;
  }
  // Off: try again as soon as this epoch's rate without readahead is measured.
  if (state_ == State::kOff) next_probe_ = now;
  measuring_ = false;
  rate_periods_ = late_periods_ = 0;  // the CPU's saturation carries on
  epoch_start_ = true;
  period_start_ = now;
  period_accesses_ = period_hits_ = period_overtaken_ = 0;
}

uint32_t ReadaheadGate::Depth(uint32_t wanted) {
  MutexLock lock(mu_);
  const Clock::time_point now = now_();
  AdvanceLocked(now);
  if (wanted != depth_) {
    depth_ = wanted;
    depth_changed_ = now;
  }
  return state_ == State::kOn || state_ == State::kTrying ? wanted : 0;
}

bool ReadaheadGate::Allows() {
  MutexLock lock(mu_);
  AdvanceLocked(now_());
  return state_ == State::kOn || state_ == State::kTrying;
}

ReadaheadGate::State ReadaheadGate::state() const {
  MutexLock lock(mu_);
  return state_;
}

bool ReadaheadGate::Runs() const {
  MutexLock lock(mu_);
  return state_ == State::kOn || state_ == State::kTrying;
}

uint64_t ReadaheadGate::offs() const {
  MutexLock lock(mu_);
  return offs_;
}

uint64_t ReadaheadGate::probes() const {
  MutexLock lock(mu_);
  return probes_;
}

uint64_t ReadaheadGate::overtaken() const {
  MutexLock lock(mu_);
  return overtaken_;
}

}  // namespace epochfs::prefetch
