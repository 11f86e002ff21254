// classify_fashion: serves a model that mlp_fashion trained (docs/inference.md, "Serving a model").
// Loads the --checkpoint, rebuilds the MLP from the shapes of its weights, and classifies one input
// at a time under InferenceMode, printing one line per input as soon as it is read:
//   <input>\t<class>\t<probability>
// Inputs: the files named on the command line, or else the lines of stdin. A file is a 28x28 PGM
// image (binary P5 or text P2, maxval <= 255); a line of stdin is such a file's path, or 784 pixel
// values 0..255 separated by spaces or commas. A bad input gets a message on stderr naming it, the
// others are still classified, and the exit status is then 1.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "example_util.h"

using namespace tapegrad;

namespace {

constexpr int64_t kPixels = 28 * 28;
const char* const kClasses[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                  "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

// mlp_fashion's model from its checkpoint: Linear layers model.0, model.2, ... with ReLU between,
// 784 inputs and 10 outputs, each layer's width read from its weight.
std::shared_ptr<nn::Sequential> load_model(const std::string& path, Device device) {
  SafetensorsDict file = load_safetensors(path);
  auto model = std::make_shared<nn::Sequential>();
  StateDict weights;
  int64_t width = kPixels;
  for (int64_t layer = 0;; layer += 2) {
    const std::string prefix = "model." + std::to_string(layer) + ".";
    const Tensor* w = file.find(prefix + "weight");
    const Tensor* b = file.find(prefix + "bias");
    if (w == nullptr) {
      if (layer == 0) throw Error(path + " is not an mlp_fashion checkpoint: it has no 'model.0.weight'");
      break;
    }
    if (w->dim() != 2 || w->size(1) != width || b == nullptr || b->sizes() != Shape{w->size(0)})
      throw Error(path + ": '" + prefix + "weight' " + shape_str(w->sizes()) +
                  " (and its bias) does not follow a layer of " + std::to_string(width) +
                  " outputs; not an mlp_fashion checkpoint");
    if (layer > 0) model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Linear>(width, w->size(0)));
    weights.emplace_back(std::to_string(layer) + ".weight", *w);
    weights.emplace_back(std::to_string(layer) + ".bias", *b);
    width = w->size(0);
  }
  if (width != 10) throw Error(path + ": the last layer has " + std::to_string(width) + " outputs, not the 10 classes");
  model->load_state_dict(weights);
  model->to(device);
  model->eval();
  return model;
}

// The next whitespace-separated token of a PGM header, skipping '#' comments.
std::string pgm_token(std::istream& in) {
  std::string token;
  while (in >> token) {
    if (token[0] != '#') return token;
    std::string rest;
    std::getline(in, rest);
  }
  return "";
}

int64_t pgm_number(std::istream& in, const std::string& what, const std::string& path) {
  const std::string token = pgm_token(in);
  try {
    size_t used = 0;
    const long long v = std::stoll(token, &used);
    if (used == token.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw Error(path + ": bad PGM " + what + " '" + token + "'");
}

// A 28x28 PGM file's pixels, scaled to [0, 1] as the training data were.
std::vector<float> read_pgm(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  const std::string magic = pgm_token(in);
  if (magic != "P5" && magic != "P2") throw Error(path + ": not a PGM image (P5 or P2), starts with '" + magic + "'");
  const int64_t width = pgm_number(in, "width", path), height = pgm_number(in, "height", path);
  const int64_t maxval = pgm_number(in, "maxval", path);
  if (width != 28 || height != 28)
    throw Error(path + ": the image is " + std::to_string(width) + "x" + std::to_string(height) + ", not 28x28");
  if (maxval < 1 || maxval > 255) throw Error(path + ": maxval " + std::to_string(maxval) + " is not in 1..255");
  std::vector<float> pixels(kPixels);
  if (magic == "P5") {
    in.get();  // the one whitespace byte after maxval
    std::vector<unsigned char> bytes(kPixels);
    if (!in.read(reinterpret_cast<char*>(bytes.data()), kPixels))
      throw Error(path + ": truncated: fewer than 784 pixels");
    for (int64_t i = 0; i < kPixels; ++i) pixels[size_t(i)] = float(bytes[size_t(i)]) / float(maxval);
  } else {
    for (int64_t i = 0; i < kPixels; ++i) {
      const int64_t v = pgm_number(in, "pixel " + std::to_string(i), path);
      if (v > maxval)
        throw Error(path + ": pixel " + std::to_string(i) + " = " + std::to_string(v) + " exceeds maxval");
      pixels[size_t(i)] = float(v) / float(maxval);
    }
  }
  return pixels;
}

// 784 values 0..255 separated by spaces or commas.
std::vector<float> parse_pixels(const std::string& line, const std::string& name) {
  std::string text = line;
  for (char& c : text)
    if (c == ',') c = ' ';
  std::istringstream in(text);
  std::vector<float> pixels;
  std::string token;
  while (in >> token) {
    size_t used = 0;
    double v = -1;
    try {
      v = std::stod(token, &used);
    } catch (const std::exception&) {
    }
    if (used != token.size() || !(v >= 0 && v <= 255))
      throw Error(name + ": pixel " + std::to_string(pixels.size()) + " '" + token + "' is not a number in 0..255");
    pixels.push_back(float(v / 255.0));
  }
  if (int64_t(pixels.size()) != kPixels)
    throw Error(name + ": " + std::to_string(pixels.size()) + " pixel values, expected 784 (or a PGM file's path)");
  return pixels;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options cli("classify_fashion",
                       "Classifies 28x28 images with a model mlp_fashion trained: one line per input, "
                       "<input>\\t<class>\\t<probability>. Inputs: PGM files named as arguments, or else the lines "
                       "of stdin (a PGM path, or 784 pixel values 0..255).");
  cli.add_options()("checkpoint", "a checkpoint written by mlp_fashion --checkpoint",
                    cxxopts::value<std::string>()->default_value(""))(
      "device", "cpu, cuda, cuda:N or auto", cxxopts::value<std::string>()->default_value("cpu"))(
      "threads", "CPU threads (0: OpenMP's default)", cxxopts::value<std::string>()->default_value("0"))(
      "seed", "unused (every example takes it)", cxxopts::value<std::string>()->default_value("0"))(
      "files", "PGM images", cxxopts::value<std::vector<std::string>>())("h,help", "this help");
  cli.parse_positional({"files"});
  cli.positional_help("[FILE...]");
  return examples::run_example("classify_fashion", [&] {
    std::optional<cxxopts::ParseResult> parsed = examples::parse_command_line(cli, argc, argv);
    if (!parsed) return 0;
    const cxxopts::ParseResult& args = *parsed;
    const std::string checkpoint = args["checkpoint"].as<std::string>();
    if (checkpoint.empty()) throw examples::UsageError("--checkpoint is required");
    const Device device = examples::pick_device(args["device"].as<std::string>());
    std::shared_ptr<nn::Sequential> model = load_model(checkpoint, device);

    InferenceMode inference;
    int failed = 0, done = 0;
    double seconds = 0;
    auto classify = [&](const std::string& name, const std::function<std::vector<float>()>& read) {
      try {
        const std::vector<float> pixels = read();
        const auto start = std::chrono::steady_clock::now();
        Tensor x = tensor(pixels, {1, kPixels});
        Tensor probs = softmax(model->forward(x.to(device)), 1).cpu().contiguous();
        const float* p = probs.data<float>();
        int best = 0;
        for (int c = 1; c < 10; ++c)
          if (p[c] > p[best]) best = c;
        seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::printf("%s\t%s\t%.4f\n", name.c_str(), kClasses[best], double(p[best]));
        std::fflush(stdout);
        ++done;
      } catch (const Error& e) {
        std::fprintf(stderr, "classify_fashion: %s\n", e.what());
        ++failed;
      }
    };
    if (args.count("files")) {
      for (const std::string& path : args["files"].as<std::vector<std::string>>())
        classify(path, [&] { return read_pgm(path); });
    } else {
      std::string line;
      for (int64_t number = 1; std::getline(std::cin, line); ++number) {
        const std::string name = "line " + std::to_string(number);
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const bool is_pixels = line.find_first_not_of("0123456789., \t\r") == std::string::npos &&
                               line.find_first_of(", \t") != std::string::npos;
        if (is_pixels)
          classify(name, [&] { return parse_pixels(line, name); });
        else
          classify(line, [&] { return read_pgm(line); });
      }
    }
    std::fprintf(stderr, "classify_fashion: %d inputs classified (%.1f us each), %d failed\n", done,
                 done > 0 ? seconds / done * 1e6 : 0.0, failed);
    return failed > 0 ? 1 : 0;
  });
}
