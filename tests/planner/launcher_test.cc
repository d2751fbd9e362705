// Launch command, hostfile text and DeepSpeed's hostfile parser.
#include "planner/launcher.h"

#include <gtest/gtest.h>

namespace dsplan {
namespace {

TEST(LauncherTest, SingleNodeCommand) {
  LaunchSpec s;
  s.gpus_per_node = 4;
  EXPECT_EQ(LaunchCommand(s), "deepspeed --num_gpus 4 train.py --deepspeed ds_config.json");
  EXPECT_EQ(HostfileText(s), "");
}

TEST(LauncherTest, MultiNodeCommandUsesHostfileAndNumNodes) {
  LaunchSpec s;
  s.nodes = 2;
  s.gpus_per_node = 8;
  s.script_args = {"--model_name_or_path", "t5-3b"};
  EXPECT_EQ(LaunchCommand(s),
            "deepspeed --hostfile hostfile --num_nodes 2 --num_gpus 8 train.py "
            "--model_name_or_path t5-3b --deepspeed ds_config.json");
}

TEST(LauncherTest, ArgumentsWithSpacesAreQuoted) {
  LaunchSpec s;
  s.script = "my train.py";
  s.ds_config_path = "it's.json";
  EXPECT_EQ(LaunchCommand(s),
            "deepspeed --num_gpus 1 'my train.py' --deepspeed 'it'\\''s.json'");
}

TEST(LauncherTest, PlaceholderHostfileSaysSoAndParses) {
  Plan p;
  p.nodes = 3;
  p.gpus_per_node = 8;
  LaunchSpec s = LaunchSpecForPlan(p);
  EXPECT_TRUE(UsesPlaceholderHosts(s));
  const std::string text = HostfileText(s);
  EXPECT_NE(text.find("PLACEHOLDER"), std::string::npos) << text;
  EXPECT_NE(text.find("node3 slots=8\n"), std::string::npos) << text;
  auto parsed = ParseHostfile(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 3u);
  EXPECT_EQ((*parsed)[0], (HostSlots{"node1", 8}));
}

TEST(LauncherTest, RealHostNames) {
  Plan p;
  p.nodes = 2;
  p.gpus_per_node = 4;
  LaunchSpec s = LaunchSpecForPlan(p, {"worker-0", "worker-1"});
  EXPECT_FALSE(UsesPlaceholderHosts(s));
  EXPECT_EQ(HostfileText(s), "worker-0 slots=4\nworker-1 slots=4\n");
}

TEST(LauncherTest, HfTrainerArgs) {
  Plan p;
  p.micro_batch = 4;
  p.grad_accum = 8;
  p.precision = Precision::kBf16;
  p.gradient_clipping = 1.0;
  const std::vector<std::string> a = HfTrainerArgs(p);
  const std::vector<std::string> want = {"--per_device_train_batch_size", "4",
                                         "--gradient_accumulation_steps", "8", "--bf16",
                                         "--max_grad_norm", "1"};
  EXPECT_EQ(a, want);
}

TEST(HostfileTest, CommentsBlankLinesAndTrailingText) {
  auto r = ParseHostfile("# cluster\n\n  worker-0 slots=16\nworker-1\tslots=8 # fast one\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0], (HostSlots{"worker-0", 16}));
  EXPECT_EQ((*r)[1], (HostSlots{"worker-1", 8}));
}

TEST(HostfileTest, DuplicateHostIsAnError) {
  auto r = ParseHostfile("a slots=1\nb slots=2\na slots=4\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("multiple entries for a"), std::string::npos)
      << r.status().message();
}

TEST(HostfileTest, BadLineIsNamed) {
  for (const char* bad : {"worker-0 8\n", "worker-0 slots=\n", "slots=4\n", "w slots=x\n"}) {
    auto r = ParseHostfile(bad);
    ASSERT_FALSE(r.ok()) << bad;
    std::string line(bad);
    line.pop_back();
    EXPECT_NE(r.status().message().find("bad entry: '" + line + "'"), std::string::npos)
        << r.status().message();
  }
}

TEST(HostfileTest, EmptyIsAnError) {
  for (const char* empty : {"", "\n\n", "# only a comment\n"}) {
    auto r = ParseHostfile(empty);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("hostfile is empty"), std::string::npos)
        << r.status().message();
  }
}

TEST(HostfileTest, MissingFileNamesThePath) {
  auto r = ParseHostfileFile("/nonexistent/hostfile");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/hostfile"), std::string::npos);
}

}  // namespace
}  // namespace dsplan
