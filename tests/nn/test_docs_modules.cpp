// The custom-module example of docs/modules.md, copied verbatim (between the markers) so the doc
// keeps compiling; the test checks the printed tree and the state dict names the doc shows.
#include <fstream>
#include <sstream>
#include <string>

#include "support/test_util.h"

namespace {

// ---- verbatim from docs/modules.md ----
namespace nn = tapegrad::nn;
using tapegrad::Tensor;

// A bag-of-words classifier: embed the tokens, average them, then hidden layers and a head.
class TextClassifier : public nn::UnaryModule {
 public:
  TextClassifier(int64_t vocab, int64_t dim, int64_t classes, int depth) {
    embed = register_module("embed", nn::Embedding(vocab, dim, /*padding_idx=*/0));
    hidden = register_module("hidden", nn::ModuleList());
    for (int i = 0; i < depth; ++i) hidden->push_back(nn::Linear(dim, dim));
    head = register_module("head", nn::Linear(dim, classes));
  }

  // tokens: int64 [batch, length], 0 = padding -> logits [batch, classes]
  Tensor forward(const Tensor& tokens) override {
    Tensor x = embed->forward(tokens).mean(1);
    for (size_t i = 0; i < hidden->size(); ++i) x = tapegrad::relu(hidden->at<nn::Linear>(i).forward(x));
    return head->forward(x);
  }

  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::ModuleList> hidden;
  std::shared_ptr<nn::Linear> head;
};
// ---- end of the verbatim copy ----

TEST(DocsModules, CustomModuleExampleBuildsPrintsAndRuns) {
  tapegrad::manual_seed(0);
  TextClassifier model(1000, 16, 4, 2);
  std::ostringstream printed;
  printed << model;
  EXPECT_EQ(printed.str(),
            "TextClassifier(\n"
            "  (embed): Embedding(1000, 16, padding_idx=0)\n"
            "  (hidden): ModuleList(\n"
            "    (0-1): 2 x Linear(in_features=16, out_features=16, bias=true)\n"
            "  )\n"
            "  (head): Linear(in_features=16, out_features=4, bias=true)\n"
            ")");
  std::vector<std::string> names;
  for (const auto& [name, t] : model.state_dict()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"embed.weight", "hidden.0.weight", "hidden.0.bias", "hidden.1.weight",
                                             "hidden.1.bias", "head.weight", "head.bias"}));
  Tensor tokens = tapegrad::tensor<int64_t>({5, 7, 0, 0, 9, 1, 2, 3}, {2, 4});
  Tensor logits = model.forward(tokens);
  EXPECT_EQ(logits.sizes(), (tapegrad::Shape{2, 4}));
  tapegrad::sum(logits).backward();
  // The padding row (index 0) gets no gradient although tokens contain it.
  tapegrad::testing::expect_close(model.embed->weight.grad().select(0, 0), std::vector<double>(16, 0.0), 0);
  EXPECT_GT(tapegrad::max(tapegrad::abs(model.embed->weight.grad().select(0, 5))).item(), 0.0);
}

// Guards the copy: the doc's first C++ block must appear, character for character, in this file.
TEST(DocsModules, TheCopyAboveIsVerbatim) {
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::string doc = read(TAPEGRAD_SOURCE_DIR "/docs/modules.md");
  const std::string self = read(TAPEGRAD_SOURCE_DIR "/tests/nn/test_docs_modules.cpp");
  const std::string open = "```cpp\n";
  const size_t start = doc.find(open);
  ASSERT_NE(start, std::string::npos);
  const size_t end = doc.find("```", start + open.size());
  ASSERT_NE(end, std::string::npos);
  const std::string block = doc.substr(start + open.size(), end - start - open.size());
  EXPECT_GT(block.size(), 200u);
  EXPECT_NE(self.find("// ---- verbatim from docs/modules.md ----\n" + block + "// ---- end of the verbatim copy ----"),
            std::string::npos)
      << "docs/modules.md and tests/nn/test_docs_modules.cpp disagree; copy the doc's example again";
}

}  // namespace
