#include <gtest/gtest.h>

#include "core/status.h"

namespace dsplan {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  DSPLAN_ASSIGN_OR_RETURN(int h, Half(x));
  DSPLAN_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status().ok());
  Status s = Status::NotFound("model 'x'");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_EQ(s.ToString(), "not found: model 'x'");
  EXPECT_EQ(s.WithPrefix("cfg.json").message(), "cfg.json: model 'x'");
}

TEST(StatusTest, ResultPropagates) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().message(), "odd");
  EXPECT_EQ(Quarter(5).status().code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dsplan
