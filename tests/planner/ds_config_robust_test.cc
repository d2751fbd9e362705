// Issue 14, the ds_config reader: hostile input is refused with one bounded line naming the key.
#include <string>

#include <gtest/gtest.h>

#include "planner/ds_config.h"

namespace dsplan {
namespace {

DsConfigContext Cluster(int nodes, int gpus) {
  DsConfigContext c;
  c.nodes = nodes;
  c.gpus_per_node = gpus;
  return c;
}

// Parses |text|, expecting an error kept to one bounded line; returns its message.
std::string ErrorOf(const std::string& text, const DsConfigContext& ctx = Cluster(1, 2)) {
  auto r = ParseDsConfigText(text, ctx, "ds.json");
  EXPECT_FALSE(r.ok()) << text.substr(0, 200);
  if (r.ok()) return "";
  const std::string m = r.status().message();
  EXPECT_LE(m.size(), 2000u) << m.substr(0, 300);
  for (unsigned char c : m) EXPECT_TRUE(c >= 0x20 && c != 0x7f) << m.substr(0, 300);
  return m;
}

bool Has(const std::string& m, const std::string& s) { return m.find(s) != std::string::npos; }

TEST(DsConfigRobustTest, InvalidBetasAreRefusedAtReadTime) {
  // [0.9, 1e19] trained to NaN in validate --executor host and reported PASS.
  const std::string m = ErrorOf(
      R"({"train_micro_batch_size_per_gpu": 1,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 1e19]}}})");
  EXPECT_TRUE(Has(m, "betas[1]")) << m;
  EXPECT_TRUE(Has(ErrorOf(R"({"train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "Adam", "params": {"betas": [-0.1, 0.99]}}})"), "betas[0]"));
  EXPECT_TRUE(Has(ErrorOf(R"({"train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "Adam", "params": {"lr": -3}}})"), "optimizer.params.lr"));
  auto ok = ParseDsConfigText(R"({"train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "Adam", "params": {"betas": [0.9, 0.999], "lr": 1e-4}}})",
                              Cluster(1, 2), "ds.json");
  EXPECT_TRUE(ok.ok()) << ok.status().message();
}

TEST(DsConfigRobustTest, BatchProductsDoNotWrap) {
  // micro x accumulation x world wrapped to -8 and was written as "train_batch_size": -8.
  const std::string m =
      ErrorOf(R"({"train_micro_batch_size_per_gpu": 4611686018427387904,
                  "gradient_accumulation_steps": 4})");
  EXPECT_TRUE(Has(m, "overflows")) << m;
  ErrorOf(R"({"train_batch_size": 9223372036854775807,
              "train_micro_batch_size_per_gpu": 4611686018427387904,
              "gradient_accumulation_steps": 2})");
}

TEST(DsConfigRobustTest, NonPositiveBatchKeysAreRefusedBeforeDividing) {
  // INT64_MIN / -1 traps; DeepSpeed asserts every batch key > 0 anyway.
  EXPECT_TRUE(Has(ErrorOf(R"({"train_batch_size": -9223372036854775808,
                             "train_micro_batch_size_per_gpu": -1})"),
                  "greater than 0"));
  DsConfigContext ctx = Cluster(1, 2);
  ctx.global_batch = 8;
  EXPECT_TRUE(Has(ErrorOf(R"({"train_micro_batch_size_per_gpu": "auto",
                             "gradient_accumulation_steps": 0})",
                          ctx),
                  "greater than 0"));
}

TEST(DsConfigRobustTest, NestingNumbersAndBytes) {
  EXPECT_TRUE(Has(ErrorOf(std::string(100000, '[') + std::string(100000, ']')),
                  "nested deeper than"));
  std::string keys;
  for (int i = 0; i < 5000; ++i) keys += "{\"a\": ";
  keys += "1" + std::string(5000, '}');
  ErrorOf(R"({"zero_optimization": )" + keys + "}");
  const std::string big = ErrorOf(R"({"train_micro_batch_size_per_gpu": 1e400})");
  EXPECT_FALSE(Has(big, "[json.exception")) << big;
  ErrorOf(std::string("{\"zero_optimization\": {\"st\xff" "age\": 2}, "
                      "\"train_micro_batch_size_per_gpu\": 1}"));
  const std::string nl = ErrorOf(
      R"({"zero_optimization": {"a\nb": 2}, "train_micro_batch_size_per_gpu": 1})");
  EXPECT_TRUE(Has(nl, "a\\nb")) << nl;
}

TEST(DsConfigRobustTest, HugeKeysAreCutAndQuick) {
  const std::string key(3'000'000, 'k');
  const std::string m = ErrorOf(R"({"zero_optimization": {")" + key +
                                R"(": 2}, "train_micro_batch_size_per_gpu": 1})");
  EXPECT_TRUE(Has(m, "3000000 bytes")) << m.substr(0, 300);
}

TEST(DsConfigRobustTest, DeviceFileIsNotRead) {
  auto r = ParseDsConfigFile("/dev/zero", Cluster(1, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Has(r.status().message(), "not a regular file")) << r.status().message();
}

}  // namespace
}  // namespace dsplan
