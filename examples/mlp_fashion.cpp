// mlp_fashion: an MLP (784-512-256-10 by default) trained on Fashion-MNIST with Adam.
#include <sstream>

#include "fashion_training.h"

using namespace tapegrad;

int main(int argc, char** argv) {
  cxxopts::Options cli("mlp_fashion", "Trains an MLP on Fashion-MNIST; prints loss, test accuracy and images/s.");
  examples::add_training_options(cli, "10", "1e-3");
  cli.add_options()("hidden", "hidden widths, comma-separated", cxxopts::value<std::string>()->default_value("512,256"));
  try {
    std::optional<cxxopts::ParseResult> parsed = examples::parse_command_line(cli, argc, argv);
    if (!parsed) return 0;
    const cxxopts::ParseResult& args = *parsed;
    nn::Sequential model;
    int64_t width = 784;
    std::stringstream widths(args["hidden"].as<std::string>());
    for (std::string item; std::getline(widths, item, ',');) {
      int64_t next = std::stoll(item);
      model.push_back(std::make_shared<nn::Linear>(width, next));
      model.push_back(std::make_shared<nn::ReLU>());
      width = next;
    }
    model.push_back(std::make_shared<nn::Linear>(width, 10));
    return examples::train_fashion("mlp_fashion", model, args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp_fashion: %s\n", e.what());
    return 1;
  }
}
