// Every committed fuzz input (the seed corpora and the inputs that once crashed a fuzz target, in
// tests/fuzz/regressions) goes through the same loaders as the fuzz targets in an ordinary build:
// each must load or throw tapegrad::Error, nothing else.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tapegrad/tapegrad.h"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> inputs_of(const std::string& target, const std::string& corpus) {
  std::vector<fs::path> files;
  for (const std::string& dir : {std::string(TAPEGRAD_SOURCE_DIR "/tests/fuzz/corpus/") + corpus,
                                 std::string(TAPEGRAD_SOURCE_DIR "/tests/fuzz/regressions/") + target}) {
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file()) files.push_back(entry.path());
  }
  return files;
}

template <class F>
void loads_or_throws_error(const fs::path& file, F&& load) {
  try {
    load(file.string());
  } catch (const Error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << file << ": threw a non-tapegrad exception: " << e.what();
  }
}

TEST(FuzzRegressions, IdxInputs) {
  auto files = inputs_of("fuzz_idx", "idx");
  EXPECT_GE(files.size(), 5u);
  for (const auto& f : files) loads_or_throws_error(f, [](const std::string& p) { (void)read_idx(p); });
}

TEST(FuzzRegressions, SafetensorsInputs) {
  auto files = inputs_of("fuzz_safetensors", "safetensors");
  EXPECT_GE(files.size(), 3u);
  for (const auto& f : files) {
    loads_or_throws_error(f, [](const std::string& p) { (void)load_safetensors(p); });
    loads_or_throws_error(f, [](const std::string& p) { (void)load_safetensors_metadata(p); });
  }
}

TEST(FuzzRegressions, ParserInputs) {
  auto files = inputs_of("fuzz_parsers", "parsers");
  EXPECT_GE(files.size(), 10u);
  for (const auto& f : files) {
    std::string text;
    {
      std::FILE* in = std::fopen(f.c_str(), "rb");
      ASSERT_NE(in, nullptr);
      char buffer[4096];
      size_t n;
      while ((n = std::fread(buffer, 1, sizeof buffer, in)) > 0) text.append(buffer, n);
      std::fclose(in);
    }
    loads_or_throws_error(f, [&](const std::string&) { (void)Device(text); });
    loads_or_throws_error(f, [&](const std::string&) { (void)parse_dtype(text); });
  }
}

}  // namespace
