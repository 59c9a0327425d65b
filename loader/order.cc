// Epoch order helpers (see loader.h).
#include <string>

#include "loader/loader.h"

namespace epochfs::loader {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias (Lemire's method with rejection).
uint64_t Below(uint64_t* state, uint64_t bound) {
  unsigned __int128 m = static_cast<unsigned __int128>(SplitMix64(state)) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    uint64_t threshold = -bound % bound;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(SplitMix64(state)) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace

std::vector<int64_t> SequentialOrder(size_t n) {
  std::vector<int64_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int64_t>(i);
  return order;
}

std::vector<int64_t> ShuffledOrder(size_t n, uint64_t seed) {
  std::vector<int64_t> order = SequentialOrder(n);
  uint64_t state = seed;
  for (size_t i = n; i > 1; --i) {
    size_t j = static_cast<size_t>(Below(&state, i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

Result<std::vector<int64_t>> ShardOrder(const std::vector<int64_t>& order, int rank, int world_size,
                                        bool drop_last) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return Status(Code::kInvalidArgument,
                  "shard: rank " + std::to_string(rank) +
                      " is not in [0, world_size=" + std::to_string(world_size) + ")");
  }
  const size_t n = order.size();
  const size_t w = static_cast<size_t>(world_size);
  // torch.utils.data.DistributedSampler.__init__ and __iter__.
  size_t per_rank;
  if (drop_last && n % w != 0) {
    per_rank = (n - w + w - 1) / w;  // ceil((n - w) / w); n > w here unless n < w
    if (n < w) per_rank = 0;
  } else {
    per_rank = (n + w - 1) / w;
  }
  const size_t total = per_rank * w;
  std::vector<int64_t> padded(order.begin(), order.begin() + std::min(n, total));
  if (!drop_last && total > n) {
    if (n == 0) return std::vector<int64_t>{};
    // indices += (indices * ceil(pad / n))[:pad], i.e. repeat the head cyclically.
    for (size_t i = 0; padded.size() < total; ++i) padded.push_back(order[i % n]);
  }
  std::vector<int64_t> shard;
  shard.reserve(per_rank);
  for (size_t i = static_cast<size_t>(rank); i < total; i += w) shard.push_back(padded[i]);
  return shard;
}

}  // namespace epochfs::loader
