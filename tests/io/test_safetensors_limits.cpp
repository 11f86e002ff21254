// Hostile safetensors headers that are valid but huge: parsing stays n log n in the number of
// entries (it was quadratic: 150,000 entries took 21 s), for load_safetensors_metadata too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/test_util.h"
#include "tapegrad/io/safetensors.h"

namespace tapegrad {
namespace {

namespace fs = std::filesystem;

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A file of `count` one-float tensors named in reverse order of their data (so the header order,
// the name order and the data order all differ), with every value equal to its index.
std::string many_entries_file(int count) {
  std::string json = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::string data(static_cast<size_t>(count) * 4, '\0');
  for (int i = 0; i < count; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "t%07d", count - 1 - i);
    json += ",\"" + std::string(name) + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" +
            std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
    const float value = static_cast<float>(i);
    std::memcpy(&data[static_cast<size_t>(i) * 4], &value, 4);
  }
  json += "}";
  return le64(json.size()) + json + data;
}

// Issue 16, item 5. Before the fix this case ran for minutes (nlohmann's ordered map and its parse
// callback each searched the whole header per entry); now it takes a few seconds at most.
TEST(SafetensorsLimits, HeaderWithManyEntriesParsesInNearLinearTime) {
  constexpr int kCount = 150000;
  const std::string p =
      (fs::temp_directory_path() / ("tapegrad_many_entries_" + std::to_string(::getpid()) + ".safetensors")).string();
  {
    const std::string bytes = many_entries_file(kCount);
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  EXPECT_EQ(load_safetensors_metadata(p).at("format"), "pt");
  StateDict loaded = load_safetensors(p);
  fs::remove(p);
  ASSERT_EQ(loaded.size(), static_cast<size_t>(kCount));
  // Returned in data order; entry i holds the value i and is named t(count-1-i).
  for (int i : {0, 1, kCount / 2, kCount - 1}) {
    char name[32];
    std::snprintf(name, sizeof name, "t%07d", kCount - 1 - i);
    EXPECT_EQ(loaded[static_cast<size_t>(i)].first, name);
    EXPECT_EQ(loaded[static_cast<size_t>(i)].second.item(), static_cast<double>(i));
  }
}

// Empty tensors share an offset; they keep the header's order, not the names' order.
TEST(SafetensorsLimits, EmptyTensorsKeepHeaderOrderWithTheTreeParser) {
  const std::string json =
      "{\"zz\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
      "\"aa\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
      "\"mm\":{\"dtype\":\"I64\",\"shape\":[0,3],\"data_offsets\":[0,0]}}";
  const std::string p =
      (fs::temp_directory_path() / ("tapegrad_empty_order_" + std::to_string(::getpid()) + ".safetensors")).string();
  {
    const std::string bytes = le64(json.size()) + json;
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  StateDict loaded = load_safetensors(p);
  fs::remove(p);
  ASSERT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded[0].first, "zz");
  EXPECT_EQ(loaded[1].first, "aa");
  EXPECT_EQ(loaded[2].first, "mm");
}

}  // namespace
}  // namespace tapegrad
