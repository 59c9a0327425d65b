// What the machine itself allows: `threads` threads reading whole files with open, pread
// and close, as fast as they can, into one buffer of `dest_bytes` (touched first, so no
// page fault is timed), each file at the next place in it, as the loader fills its ring:
// a small buffer that stays in the CPU's cache would flatter the limit. bench/loader_bench.py measures the loader against this, in the same
// run: a loader that delivers close to it is bound by the machine, not by its design.
//
// Thread-safety: a pure function (it starts and joins its threads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace epochfs::loader {

struct PreadRate {
  uint64_t files = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

// Reads `files` over and over (each thread takes the next file of a shared cursor) for
// at least `seconds`, and at least once each.
PreadRate MeasureParallelPread(const std::vector<std::string>& files, unsigned threads,
                               double seconds, uint64_t dest_bytes);

}  // namespace epochfs::loader
