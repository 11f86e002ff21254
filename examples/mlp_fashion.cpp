// mlp_fashion: an MLP (784-512-256-10 by default) trained on Fashion-MNIST with Adam.
#include <sstream>

#include "fashion_training.h"
#include "profile_cli.h"

using namespace tapegrad;

int main(int argc, char** argv) {
  cxxopts::Options cli("mlp_fashion", "Trains an MLP on Fashion-MNIST; prints loss, test accuracy and images/s.");
  examples::add_training_options(cli, "10", "1e-3");
  examples::add_profile_options(cli);
  cli.add_options()("hidden", "hidden widths, comma-separated (each 1 to 1048576)",
                    cxxopts::value<std::string>()->default_value("512,256"));
  return examples::run_example("mlp_fashion", [&] {
    std::optional<cxxopts::ParseResult> parsed = examples::parse_command_line(cli, argc, argv);
    if (!parsed) return 0;
    const cxxopts::ParseResult& args = *parsed;
    examples::check_fashion_paths(args);
    examples::ProfileSession profile(args);
    nn::Sequential model;
    int64_t width = 784;
    std::stringstream widths(args["hidden"].as<std::string>());
    for (std::string item; std::getline(widths, item, ',');) {
      int64_t next = examples::parse_int("hidden", item, 1, int64_t{1} << 20);
      model.push_back(std::make_shared<nn::Linear>(width, next));
      model.push_back(std::make_shared<nn::ReLU>());
      width = next;
    }
    model.push_back(std::make_shared<nn::Linear>(width, 10));
    return examples::train_fashion("mlp_fashion", model, args);
  });
}
