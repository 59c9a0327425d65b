// FakeClock: a steady clock the test moves by hand, for the prefetcher's controllers
// that take a `std::function<Clock::time_point()>` (SourcePacer, ReadaheadGate).
#pragma once

#include <chrono>
#include <functional>

namespace epochfs::prefetch::testing {

struct FakeClock {
  std::chrono::steady_clock::time_point t{};
  std::function<std::chrono::steady_clock::time_point()> fn() {
    return [this] { return t; };
  }
};

}  // namespace epochfs::prefetch::testing
