// The GPU loader against a real epochfs mount: the order it publishes is exactly the
// order the mount receives (checked by fingerprint) and exactly what it then reads.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <map>

#include "loader/loader.h"
#include "prefetcher/prefetcher.h"
#include "tests/mount_fixture.h"

namespace epochfs::testing {
namespace {

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

using LoaderOnMount = MountedDirsTest;

TEST_F(LoaderOnMount, PublishedOrderIsWhatTheMountGetsAndWhatIsRead) {
  Dataset d = Dataset::Make(src_, 120, 4, 20000, 41);
  std::map<std::string, std::string> content(d.files.begin(), d.files.end());
  Mount m(src_, mnt_, cache_);
  ASSERT_TRUE(m.ok()) << m.output();

  const std::string root = fsys::canonical(mnt_).string();
  auto scanned = loader::ScanImageFolder(root);
  ASSERT_TRUE(scanned.ok()) << scanned.status().ToString();
  const size_t n = scanned->files.size();
  ASSERT_EQ(n, d.files.size());
  loader::LoaderOptions options;
  options.files = scanned->files;
  options.labels = scanned->labels;
  options.batch_size = 16;
  options.device = loader::DeviceKind::kCpu;
  auto created = loader::Loader::Create(options);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto& l = *created;
  EXPECT_EQ(l->plan_root(), root);

  for (uint64_t seed : {7u, 8u}) {  // two epochs, two plans
    const std::vector<int64_t> order = loader::ShuffledOrder(n, seed);
    ASSERT_TRUE(l->StartEpoch(order).ok());
    std::vector<int64_t> seen;
    while (true) {
      auto batch = l->Next();
      ASSERT_TRUE(batch.ok()) << batch.status().ToString();
      if (!*batch) break;
      const auto& b = **batch;
      for (size_t i = 0; i < b.size(); ++i) {
        const int64_t index = b.sample_indices()[i];
        seen.push_back(index);
        const std::string rel = options.files[index].substr(root.size() + 1);
        const std::string got(static_cast<const char*>(b.data()) + b.offsets()[i],
                              static_cast<size_t>(b.lengths()[i]));
        EXPECT_TRUE(got == content.at(rel)) << rel << ": wrong bytes";
      }
    }
    EXPECT_EQ(seen, order) << "the loader read another order than it was given";

    std::vector<std::string> published;
    for (int64_t index : order) published.push_back(options.files[index].substr(root.size() + 1));
    auto stats = m.Stats();
    EXPECT_EQ(stats["plan_entries"].get<uint64_t>(), n) << stats.dump();
    EXPECT_EQ(stats["plan_fingerprint"].get<std::string>(), Hex(prefetch::PlanFingerprint(published)))
        << "the mount got another order than the loader read";
  }
  EXPECT_EQ(l->stats().plans_published, 2u);
  EXPECT_EQ(l->stats().plans_refused, 0u);
}

}  // namespace
}  // namespace epochfs::testing
