#include "core/output_file.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

namespace dsplan {
namespace {

namespace fs = std::filesystem;

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dsplan_output_file_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string Read(const std::string& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  static void Write(const std::string& p, const std::string& s) { std::ofstream(p) << s; }
  bool OnlyFile(const std::string& name) const {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) {
      ++n;
      if (e.path().filename() != name) return false;
    }
    return n == 1;
  }
  fs::path dir_;
};

TEST_F(OutputFileTest, WritesANewFileAndLeavesNoTemporary) {
  ASSERT_TRUE(WriteOutputFile(Path("a.json"), "{}\n", OutputPolicy{}).ok());
  EXPECT_EQ(Read(Path("a.json")), "{}\n");
  EXPECT_TRUE(OnlyFile("a.json"));
}

TEST_F(OutputFileTest, AnExistingFileNeedsForce) {
  Write(Path("a.json"), "mine");
  const Status s = WriteOutputFile(Path("a.json"), "new", OutputPolicy{{}, false, "--emit"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--force"), std::string::npos) << s.message();
  EXPECT_EQ(Read(Path("a.json")), "mine");
  ASSERT_TRUE(WriteOutputFile(Path("a.json"), "new", OutputPolicy{{}, true, "--emit"}).ok());
  EXPECT_EQ(Read(Path("a.json")), "new");
}

TEST_F(OutputFileTest, AnInputIsNeverWrittenEvenWithForce) {
  Write(Path("config.json"), "input");
  const Status s = WriteOutputFile(Path("./config.json"), "x",
                                   OutputPolicy{{Path("config.json")}, true, "--trace"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("input"), std::string::npos) << s.message();
  EXPECT_EQ(Read(Path("config.json")), "input");
}

TEST_F(OutputFileTest, ANameThatIsNoFileIsNoInput) {
  // A catalog model name is not a file: writing a file of that name is fine.
  EXPECT_TRUE(CheckOutputPath(Path("gpt2"), OutputPolicy{{"gpt2-no-such-file"}, false, "--emit"}).ok());
}

TEST_F(OutputFileTest, FreeOutputPathMovesAside) {
  EXPECT_EQ(FreeOutputPath(Path("ds_config.json"), {}), Path("ds_config.json"));
  Write(Path("ds_config.json"), "mine");
  EXPECT_EQ(FreeOutputPath(Path("ds_config.json"), {}), Path("ds_config-1.json"));
  Write(Path("ds_config-1.json"), "mine too");
  EXPECT_EQ(FreeOutputPath(Path("ds_config.json"), {}), Path("ds_config-2.json"));
}

TEST_F(OutputFileTest, AFailedWriteIsAnErrorWithItsCause) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const Status s = WriteOutputFile("/dev/full", std::string(1 << 16, 'x'));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("No space left"), std::string::npos) << s.message();
}

TEST_F(OutputFileTest, AMissingFolderIsRefusedBeforeWriting) {
  const Status s = CheckOutputPath(Path("no/such/x.json"), OutputPolicy{{}, false, "--emit"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("does not exist"), std::string::npos) << s.message();
  EXPECT_FALSE(WriteOutputFile(Path("no/such/x.json"), "x").ok());
}

}  // namespace
}  // namespace dsplan
