#include "fs/fuse_ops.h"

#include <gtest/gtest.h>

namespace epochfs::fs {
namespace {

TEST(ToErrno, TheSourcesOwnErrnoIsRepliedAsItWas) {
  EXPECT_EQ(ToErrno(Status::FromErrno(ENOTEMPTY, "rmdir")), ENOTEMPTY);
  EXPECT_EQ(ToErrno(Status::FromErrno(EXDEV, "rename")), EXDEV);
}

TEST(ToErrno, EveryCodeWithoutAnErrnoGetsItsOwn) {
  EXPECT_EQ(ToErrno(Status::Ok()), 0);
  EXPECT_EQ(ToErrno(Status::NotFound("x")), ENOENT);
  EXPECT_EQ(ToErrno(Status::Stale("x")), ESTALE);
  EXPECT_EQ(ToErrno(Status::InvalidArgument("x")), EINVAL);
  EXPECT_EQ(ToErrno(Status(Code::kCorruption, "x")), EIO) << "never bad bytes, a failed read";
  EXPECT_EQ(ToErrno(Status(Code::kNoSpace, "x")), ENOSPC);
  EXPECT_EQ(ToErrno(Status(Code::kBusy, "x")), EAGAIN);
  EXPECT_EQ(ToErrno(Status(Code::kPermission, "x")), EACCES);
  EXPECT_EQ(ToErrno(Status(Code::kUnsupported, "x")), ENOSYS);
  EXPECT_EQ(ToErrno(Status(Code::kNoMemory, "x")), ENOMEM);
  EXPECT_EQ(ToErrno(Status(Code::kDeviceError, "x")), EIO);
}

}  // namespace
}  // namespace epochfs::fs
