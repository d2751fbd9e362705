// The PyTorch stack's GEMMs are priced from the GEMM rows measured through PyTorch (stack.gemm)
// when the profile has them, dsplan's runtime from gpu.gemm; the stack section's host costs
// replace the built-in ones. One small synthetic profile (h200-sxm plus a stack section).
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "core/hardware_profile.h"
#include "simulator/cost_model.h"
#include "simulator/gemm_table.h"
#include "simulator/stack_costs.h"

namespace dsplan {
namespace {

std::string Shipped(const std::string& name) {
  std::ifstream in(std::string(DSPLAN_TEST_DATA_DIR) + "/profiles/" + name + ".yaml");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// |gpu_rows|: gpu.gemm rows to add ("" for none).
HardwareProfile Synthetic(const std::string& gpu_rows, const std::string& stack_rows,
                          bool zero3) {
  std::string text = Shipped("h200-sxm");
  if (!gpu_rows.empty()) {
    const std::string at = "  kernel_launch_s:";
    text.insert(text.find(at), "  gemm_source: {measured: \"test rows\"}\n  gemm:\n" + gpu_rows);
  }
  text += R"(stack:
  measured: "test"
  gpu: "Test GPU"
  date: "2027-01-01"
  versions: {torch: "9.9.0"}
  reference_stream_bytes_per_s: 3e12
  kernels: {stream: [3e12, 3e12], cast_up: [2e12, 2e12], cast_down: [3e12, 3e12], reduce: [2e12, 2e12], norm: [1.9e12, 1.4e12], activation: [2.3e12, 2.4e12], dropout: [2.3e12, 2.7e12], softmax: [1.1e12, 1.7e12], log_softmax: [1.8e12, 2.4e12]}
  ops: {gemm: [40e-6, 150e-6], batched_gemm: [45e-6, 70e-6], attention: [37e-6, 63e-6], norm: [31e-6, 70e-6], activation: [12e-6, 21e-6], dropout: [30e-6, 33e-6], elementwise: [9e-6, 7e-6], embedding: [40e-6, 70e-6], softmax: [13e-6, 28e-6], loss: [13e-6, 28e-6]}
  kernel_s: [25e-6, 7e-6]
)";
  if (zero3) {
    text += "  zero3: {fwd_per_module_s: 1e-4, fwd_per_param_s: 2e-4, bwd_per_module_s: 3e-4, "
            "bwd_per_param_s: 4e-4}\n";
  }
  if (!stack_rows.empty()) {
    text += "  gemm_source: {measured: \"torch rows\"}\n  gemm:\n" + stack_rows;
  }
  auto p = ParseHardwareProfile(text, "synthetic.yaml");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : HardwareProfile{};
}

constexpr double kFlops = 2.0 * 4096 * 1024 * 1024;

TEST(StackGemmSelectionTest, PyTorchStackUsesStackGemmRuntimeUsesGpuGemm) {
  const HardwareProfile p = Synthetic("    - [bf16, 4096, 1024, 1024, 400e12, nt]\n",
                                      "    - [bf16, 4096, 1024, 1024, 250e12, nt]\n", true);
  ASSERT_EQ(p.gpu.gemm.size(), 1u);
  ASSERT_EQ(p.stack.gemm.size(), 1u);
  const CostModel torch(p, Precision::kBf16, SoftwareStack::kPyTorchDeepSpeed);
  const CostModel runtime(p, Precision::kBf16, SoftwareStack::kDsplanRuntime);
  EXPECT_NEAR(torch.GemmSeconds(Precision::kBf16, 4096, 1024, 1024, 1), kFlops / 250e12, 1e-12);
  EXPECT_NEAR(runtime.GemmSeconds(Precision::kBf16, 4096, 1024, 1024, 1), kFlops / 400e12, 1e-12);
  EXPECT_NEAR(torch.LinearGemmSeconds(GemmLayout::kNT, 4096, 1024, 1024), kFlops / 250e12, 1e-12);
  EXPECT_NEAR(runtime.LinearGemmSeconds(GemmLayout::kNT, 4096, 1024, 1024), kFlops / 400e12,
              1e-12);
  // A dtype the PyTorch rows lack falls to gpu.gemm's rows of that dtype (none here: the
  // datasheet efficiency), never to the other dtype's PyTorch rows.
  const std::vector<GemmPoint> rows = StackGemmRows(p, true);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].flops_per_s, 250e12);
  EXPECT_EQ(StackGemmRows(p, false), p.gpu.gemm);
}

TEST(StackGemmSelectionTest, DtypesTheStackTableLacksComeFromGpuGemm) {
  const HardwareProfile p = Synthetic(
      "    - [bf16, 4096, 1024, 1024, 400e12, nt]\n    - [fp16, 4096, 1024, 1024, 380e12, nt]\n",
      "    - [bf16, 4096, 1024, 1024, 250e12, nt]\n", true);
  const std::vector<GemmPoint> rows = StackGemmRows(p, true);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].flops_per_s, 250e12);
  EXPECT_EQ(rows[1].dtype, Precision::kFp16);
  const CostModel torch(p, Precision::kFp16, SoftwareStack::kPyTorchDeepSpeed);
  EXPECT_NEAR(torch.GemmSeconds(Precision::kFp16, 4096, 1024, 1024, 1), kFlops / 380e12, 1e-12);
}

TEST(StackGemmSelectionTest, WithoutStackRowsBothStacksUseGpuGemm) {
  const HardwareProfile p = Synthetic("    - [bf16, 4096, 1024, 1024, 400e12, nt]\n", "", true);
  const CostModel torch(p, Precision::kBf16, SoftwareStack::kPyTorchDeepSpeed);
  EXPECT_NEAR(torch.GemmSeconds(Precision::kBf16, 4096, 1024, 1024, 1), kFlops / 400e12, 1e-12);
}

TEST(StackGemmSelectionTest, TheSectionsHostCostsReplaceTheBuiltInOnes) {
  const HardwareProfile with_z3 = Synthetic("", "", true);
  const CostModel m(with_z3, Precision::kBf16);
  EXPECT_EQ(m.stack_costs().kernel_fwd_s, 25e-6);
  EXPECT_EQ(m.stack_costs().OpFwd(OpKind::kGemm), 40e-6);
  EXPECT_EQ(m.stack_costs().z3_bwd_per_param_s, 4e-4);
  EXPECT_EQ(m.stack_costs().Block("gpt2", LayerKind::kDecoderBlock), nullptr);
  // A plain tensor op from DeepSpeed's loops costs the section's kernel time (above the launch).
  EXPECT_EQ(m.DispatchSeconds(), 25e-6);
  // Without zero3 in the section: DeepSpeed's hook costs are the built-in ones.
  const HardwareProfile no_z3 = Synthetic("", "", false);
  const CostModel n(no_z3, Precision::kBf16);
  EXPECT_EQ(n.stack_costs().z3_bwd_per_param_s, MeasuredStackCosts().z3_bwd_per_param_s);
  // Without a section: the built-in costs themselves.
  auto plain = FindHardwareProfile("h200-sxm", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(plain.ok());
  const CostModel b(*plain, Precision::kBf16);
  EXPECT_EQ(&b.stack_costs(), &MeasuredStackCosts());
  // The section's kernel names are simulator/workload.h's first kStackKernelClasses, in its
  // order; the layout classes after them come from another probe and are not in the section.
  for (int i = 0; i < kStackKernelClasses; ++i) {
    EXPECT_STREQ(StackKernelClassName(i), KernelClassName(static_cast<KernelClass>(i)));
  }
  // A section keeps the built-in rates of the classes it does not hold, and the optimizer
  // step's costs.
  for (int i = kStackKernelClasses; i < kKernelClassCount; ++i) {
    EXPECT_EQ(m.stack_costs().fwd_bytes_per_s[i], MeasuredStackCosts().fwd_bytes_per_s[i]);
    EXPECT_GT(m.stack_costs().fwd_bytes_per_s[i], 0);
  }
  EXPECT_EQ(m.stack_costs().z12_step_per_param_s, MeasuredStackCosts().z12_step_per_param_s);
  EXPECT_GT(m.stack_costs().fp64_cast_bytes_per_s, 0);
  for (int i = 0; i < kOpKindCount; ++i) {
    EXPECT_STREQ(StackOpKindName(i), OpKindName(static_cast<OpKind>(i)));
  }
}

}  // namespace
}  // namespace dsplan
