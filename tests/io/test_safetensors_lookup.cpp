// load_safetensors results looked up by name (SafetensorsDict), while every older use of the
// result as a StateDict keeps working.
#include <unistd.h>

#include <filesystem>
#include <string>

#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_close;
using testing::expect_error;
namespace fs = std::filesystem;

class SafetensorsLookup : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ =
        (fs::temp_directory_path() / ("tapegrad_st_lookup_" + std::to_string(::getpid()) + ".safetensors")).string();
    save_safetensors(path_, {{"fc.weight", tensor<float>({1, 2, 3, 4}, {2, 2})},
                             {"fc.bias", tensor<float>({5, 6})},
                             {"step", tensor<int64_t>({9})}});
  }
  void TearDown() override { fs::remove(path_); }
  std::string path_;
};

TEST_F(SafetensorsLookup, FindAndAtByName) {
  SafetensorsDict file = load_safetensors(path_);
  EXPECT_EQ(file.path(), path_);
  expect_close(file.at("fc.bias"), {5, 6}, 0);
  EXPECT_EQ(file.at("step").dtype(), kInt64);
  ASSERT_NE(file.find("fc.weight"), nullptr);
  EXPECT_EQ(file.find("fc.weight")->sizes(), (Shape{2, 2}));
  EXPECT_EQ(file.find("fc.wieght"), nullptr);
  EXPECT_TRUE(file.contains("step"));
  EXPECT_FALSE(file.contains("Step"));  // names are case-sensitive
  // The found tensor is the one in the list, not a copy of the handle.
  file.at("fc.bias") = zeros({2});
  expect_close(file[1].second, {0, 0}, 0);
  const SafetensorsDict& constant = file;
  EXPECT_NE(constant.find("step"), nullptr);
}

TEST_F(SafetensorsLookup, MissingNameIsAnErrorNamingTheKeyAndTheFile) {
  SafetensorsDict file = load_safetensors(path_);
  expect_error([&] { file.at("model.fc.weight"); },
               {"load_safetensors", "'model.fc.weight'", path_, "3 tensors", "'fc.weight'"});
  SafetensorsDict empty_dict;
  expect_error([&] { empty_dict.at("x"); }, {"'x'", "0 tensors"});
}

TEST_F(SafetensorsLookup, OlderUsesAsAStateDictStillWork) {
  StateDict sliced = load_safetensors(path_);  // a StateDict, as before
  ASSERT_EQ(sliced.size(), 3u);
  EXPECT_EQ(sliced[0].first, "fc.weight");
  EXPECT_EQ(load_safetensors(path_).at(0).first, "fc.weight");  // positional at() still reaches the pair
  int count = 0;
  for (auto& [name, t] : load_safetensors(path_)) count += t.defined() ? 1 : 0;
  EXPECT_EQ(count, 3);
  nn::Module owner;
  auto fc = owner.register_module("fc", nn::Linear(2, 2));
  {
    nn::LoadStateDictResult r = owner.load_state_dict(load_safetensors(path_), /*strict=*/false);
    EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"step"}));
    EXPECT_TRUE(r.missing_keys.empty());
  }
  expect_close(fc->weight, {1, 2, 3, 4}, 0);
}

}  // namespace
}  // namespace tapegrad
