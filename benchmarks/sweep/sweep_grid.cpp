#include "sweep/sweep_grid.h"

#include <algorithm>
#include <set>

#include "tapegrad/core/error.h"

namespace tapegrad::bench {

std::vector<SweepCurve> sweep_grid(bool quick) {
  auto named = [](const char* name, std::vector<int64_t> batches) {
    return SweepCurve{name, named_config(name).shape, std::move(batches)};
  };
  if (quick) {
    return {named("mlp_seed", {1, 16, 64, 256, 1024, 4096}), named("lstm_small", {1, 16, 64, 256})};
  }
  const std::vector<int64_t> mlp_batches = {1, 4, 16, 64, 256, 1024, 4096};
  const std::vector<int64_t> lstm_batches = {1, 4, 16, 64, 256, 1024};
  std::vector<SweepCurve> curves = {named("mlp_seed", mlp_batches), named("mlp_fashion", mlp_batches)};
  for (int64_t width : {64, 256, 1024, 4096})  // the mlp_seed shape with its hidden width varied
    curves.push_back({"mlp W=" + std::to_string(width), ModelShape::mlp({1000, width, 10}), mlp_batches});
  for (const char* name : {"lstm_row", "lstm_small", "lstm_large"}) curves.push_back(named(name, lstm_batches));
  curves.push_back(named("char_lstm", {1, 4, 16, 32, 64, 256}));
  for (int64_t hidden : {64, 256, 1024})  // the lstm_small shape with its hidden size varied
    curves.push_back({"lstm H=" + std::to_string(hidden), ModelShape::lstm(32, hidden, 50), lstm_batches});
  for (int64_t steps : {10, 200})  // and with its sequence length varied
    curves.push_back({"lstm T=" + std::to_string(steps), ModelShape::lstm(32, 128, steps), lstm_batches});
  return curves;
}

std::vector<SweepCurve> select_curves(const std::vector<SweepCurve>& grid, const std::string& names) {
  // Split by hand: getline would drop an empty last name ("mlp_seed,"), which is a mistake too.
  std::vector<std::string> list;
  for (size_t start = 0;;) {
    const size_t comma = names.find(',', start);
    list.push_back(names.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::set<std::string> wanted;
  for (const std::string& name : list) {
    const auto known = [&](const SweepCurve& c) { return c.name == name; };
    if (std::none_of(grid.begin(), grid.end(), known)) {
      std::string there;
      for (const SweepCurve& c : grid) there += (there.empty() ? "" : ", ") + c.name;
      TG_CHECK(false, "--curves: no curve named '", name, "'; the grid has ", there);
    }
    wanted.insert(name);
  }
  std::vector<SweepCurve> chosen;
  for (const SweepCurve& c : grid)
    if (wanted.count(c.name)) chosen.push_back(c);
  return chosen;
}

}  // namespace tapegrad::bench
