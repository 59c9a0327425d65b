// The plan parser: a good plan in arbitrary pieces, and every bad input refused with the
// pending plan discarded.
#include "prefetcher/plan_parser.h"

#include <gtest/gtest.h>

#include <set>

namespace epochfs::prefetch {
namespace {

class PlanParserTest : public ::testing::Test {
 protected:
  PlanParser::Resolve resolve = [this](const std::string& path) -> Result<PlannedFile> {
    if (path == "secret/x") return Status::FromErrno(EACCES, "may not read");
    if (known.count(path) == 0) return Status::NotFound(path);
    return PlannedFile{path, FileKey{1, std::hash<std::string>()(path)}, 10};
  };
  std::set<std::string> known = {"a/1.jpg", "a/2.jpg", "b/3.jpg", "secret/x"};

  // Writes `text` in one piece at offset 0.
  Status WriteAll(PlanParser& p, const std::string& text,
                  std::optional<std::vector<PlannedFile>>* out) {
    return p.Write(0, text, resolve, out);
  }
};

TEST_F(PlanParserTest, GoodPlanInOddPiecesIsPublishedAtTheEmptyLine) {
  const std::string text = "epochfs-plan 1\nb/3.jpg\na/1.jpg\na/2.jpg\n\n";
  for (size_t piece : {1, 3, 7, 100}) {
    PlanParser p;
    std::optional<std::vector<PlannedFile>> out;
    for (size_t off = 0; off < text.size(); off += piece) {
      ASSERT_TRUE(p.Write(off, std::string_view(text).substr(off, piece), resolve, &out).ok());
      if (off + piece < text.size()) {
        ASSERT_FALSE(out.has_value()) << "published early";
      }
    }
    ASSERT_TRUE(out.has_value());
    ASSERT_EQ(out->size(), 3u);
    EXPECT_EQ((*out)[0].path, "b/3.jpg");
    EXPECT_EQ((*out)[2].path, "a/2.jpg");
  }
}

TEST_F(PlanParserTest, NoEmptyLineNoPlan) {
  PlanParser p;
  std::optional<std::vector<PlannedFile>> out;
  ASSERT_TRUE(WriteAll(p, "epochfs-plan 1\na/1.jpg\n", &out).ok());
  EXPECT_FALSE(out.has_value());
}

TEST_F(PlanParserTest, EveryBadInputIsRefused) {
  const std::string big(PATH_MAX + 1, 'x');
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"garbage header", "epochfs-plan 2\na/1.jpg\n\n"},
      {"no header", "a/1.jpg\n\n"},
      {"binary garbage", std::string("\x89PNG\r\n\x1a\n", 8)},
      {"dotdot", "epochfs-plan 1\n../etc/passwd\n\n"},
      {"dotdot inside", "epochfs-plan 1\na/../../x\n\n"},
      {"dot", "epochfs-plan 1\n./a/1.jpg\n\n"},
      {"empty component", "epochfs-plan 1\na//1.jpg\n\n"},
      {"absolute", "epochfs-plan 1\n/etc/passwd\n\n"},
      {"unknown", "epochfs-plan 1\na/1.jpg\nnope.jpg\n\n"},
      {"NUL", std::string("epochfs-plan 1\na/1.jpg\0x\n\n", 26)},
      {"long line", "epochfs-plan 1\n" + big + "\n\n"},
      {"long partial line", "epochfs-plan 1\n" + big},
      {"data after the end", "epochfs-plan 1\na/1.jpg\n\nb/3.jpg\n"},
  };
  for (const auto& [what, text] : bad) {
    PlanParser p;
    std::optional<std::vector<PlannedFile>> out;
    Status st = WriteAll(p, text, &out);
    EXPECT_FALSE(st.ok()) << what;
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << what << ": " << st.ToString();
    if (what != "data after the end") {
      EXPECT_FALSE(out.has_value()) << what;
    }
    // Refused for good: later writes fail until a new plan starts at offset 0.
    EXPECT_FALSE(p.Write(text.size(), "b/3.jpg\n\n", resolve, &out).ok()) << what;
  }
}

TEST_F(PlanParserTest, UnreadableFileIsAPermissionError) {
  PlanParser p;
  std::optional<std::vector<PlannedFile>> out;
  Status st = WriteAll(p, "epochfs-plan 1\nsecret/x\n\n", &out);
  EXPECT_EQ(st.code(), Code::kPermission) << st.ToString();
  EXPECT_EQ(st.err(), EACCES);
  // Said once, with the line: not "Permission denied: Permission denied".
  EXPECT_EQ(st.message(), "plan line 2: may not read: Permission denied");
  EXPECT_FALSE(out.has_value());
}

TEST_F(PlanParserTest, MoreEntriesThanTheCapAreRefused) {
  PlanParser p(PlanParserOptions{.max_entries = 2});
  std::optional<std::vector<PlannedFile>> out;
  Status st = WriteAll(p, "epochfs-plan 1\na/1.jpg\na/2.jpg\nb/3.jpg\n\n", &out);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(out.has_value());
}

TEST_F(PlanParserTest, WriteAtTheWrongOffsetIsRefusedAndOffsetZeroStartsOver) {
  PlanParser p;
  std::optional<std::vector<PlannedFile>> out;
  ASSERT_TRUE(p.Write(0, "epochfs-plan 1\n", resolve, &out).ok());
  EXPECT_FALSE(p.Write(100, "a/1.jpg\n", resolve, &out).ok());
  EXPECT_FALSE(p.Write(15, "a/1.jpg\n", resolve, &out).ok());  // refused for good
  ASSERT_TRUE(p.Write(0, "epochfs-plan 1\na/1.jpg\n", resolve, &out).ok());
  ASSERT_TRUE(p.Write(23, "\n", resolve, &out).ok());
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->size(), 1u);
}

}  // namespace
}  // namespace epochfs::prefetch
