// mlp_fashion: an MLP (784-512-256-10 by default) trained on Fashion-MNIST with Adam.
#include <sstream>

#include "fashion_training.h"

using namespace tapegrad;

int main(int argc, char** argv) {
  cxxopts::Options cli("mlp_fashion", "Trains an MLP on Fashion-MNIST; prints loss, test accuracy and images/s.");
  examples::add_training_options(cli, "10");
  cli.add_options()("hidden", "hidden widths, comma-separated", cxxopts::value<std::string>()->default_value("512,256"));
  try {
    auto args = cli.parse(argc, argv);
    if (args.count("help")) {
      std::printf("%s\n", cli.help().c_str());
      return 0;
    }
    if (args["threads"].as<int>() > 0) set_num_threads(args["threads"].as<int>());
    manual_seed(args["seed"].as<uint64_t>());
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
