// Every committed fuzz input (the seed corpora and the inputs that once crashed a fuzz target, in
// tests/fuzz/regressions) goes through the same loaders as the fuzz targets in an ordinary build:
// each must load or throw tapegrad::Error, nothing else.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "fuzz/creation_sizes_case.h"
#include "fuzz/safetensors_many_case.h"
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

std::string file_contents(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The fuzz_safetensors_many inputs: each builds a header of up to 100,000 entries.
TEST(FuzzRegressions, SafetensorsManyEntriesInputs) {
  auto files = inputs_of("fuzz_safetensors_many", "safetensors_many");
  EXPECT_GE(files.size(), 5u);
  const fs::path built = fs::temp_directory_path() / ("tapegrad_many_" + std::to_string(::getpid()));
  for (const auto& f : files) {
    const std::string seed = file_contents(f);
    const std::string bytes = safetensors_many::build(reinterpret_cast<const uint8_t*>(seed.data()), seed.size());
    std::ofstream(built, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    // As in the fuzz target: the whole header is parsed and validated by both loaders; the tensors
    // themselves are read only for small files.
    if (bytes.size() < 100000) loads_or_throws_error(built, [](const std::string& p) { (void)load_safetensors(p); });
    loads_or_throws_error(built, [](const std::string& p) { (void)load_safetensors_metadata(p); });
  }
  fs::remove(built);
}

// The fuzz_creation inputs, then a property test over random bytes from a fixed seed: creation
// and view ops with extreme sizes throw tapegrad::Error or give the right shape.
TEST(FuzzRegressions, CreationSizesInputs) {
  auto files = inputs_of("fuzz_creation", "creation");
  EXPECT_GE(files.size(), 5u);
  for (const auto& f : files) {
    const std::string seed = file_contents(f);
    EXPECT_EQ(creation_sizes::run(reinterpret_cast<const uint8_t*>(seed.data()), seed.size()), "") << f;
  }
}

TEST(FuzzRegressions, CreationSizesProperty) {
  std::mt19937_64 random(16);
  std::vector<uint8_t> bytes(40);
  for (int i = 0; i < 20000; ++i) {
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(random());
    const std::string problem = creation_sizes::run(bytes.data(), bytes.size());
    ASSERT_EQ(problem, "") << "case " << i;
  }
}

}  // namespace
