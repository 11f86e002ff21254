// The model-building API: public registration, default names, the module tree's traversal
// (named_modules, modules, children, apply) in PyTorch's order with its de-duplication, printing
// like PyTorch's repr, Sequential built in one expression, ModuleList, ModuleDict, and the
// Tanh/Sigmoid/GELU/SiLU modules.
#include <cmath>
#include <sstream>

#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_close;
using testing::expect_error;

std::vector<std::string> names(const StateDict& dict) {
  std::vector<std::string> out;
  for (const auto& [n, t] : dict) out.push_back(n);
  return out;
}

std::vector<std::string> names(const nn::NamedModules& modules) {
  std::vector<std::string> out;
  for (const auto& [n, m] : modules) out.push_back(n);
  return out;
}

class Plain : public nn::Module {};

template <class T>
class Block : public nn::Module {};

// ---- registration and names ---------------------------------------------------------------------

TEST(ModuleRegistration, PublicFromOutsideASubclass) {
  nn::Module m;
  Tensor w = m.register_parameter("w", ones({2}));
  m.register_buffer("running", zeros({2}));
  std::shared_ptr<nn::Linear> fc = m.register_module("fc", nn::Linear(2, 3));
  auto shared = std::make_shared<nn::ReLU>();
  EXPECT_EQ(m.register_module("act", shared), shared);
  EXPECT_TRUE(w.requires_grad() && w.is_leaf());
  EXPECT_EQ(names(m.named_parameters()), (std::vector<std::string>{"w", "fc.weight", "fc.bias"}));
  EXPECT_EQ(names(m.named_buffers()), (std::vector<std::string>{"running"}));
  EXPECT_EQ(m.buffers().size(), 1u);
  EXPECT_EQ(m.named_children().size(), 2u);
  EXPECT_EQ(fc->weight.sizes(), (Shape{3, 2}));
  expect_error([&] { m.register_parameter("w", ones({1})); }, {"'w'", "already registered"});
  expect_error([&] { m.register_module("fc", nn::ReLU()); }, {"'fc'", "already registered"});
  expect_error([&] { m.register_buffer("a.b", ones({1})); }, {"invalid name", "a.b"});
  expect_error([&] { m.register_module("x", std::shared_ptr<nn::Module>()); }, {"'x'", "null"});
}

TEST(ModuleRegistration, ReplaceAndUnregister) {
  nn::Module m;
  m.register_module("a", nn::Linear(2, 2));
  m.register_module("b", nn::ReLU());
  m.replace_module("a", std::make_shared<nn::Tanh>());
  EXPECT_EQ(m.named_children()[0].first, "a");
  EXPECT_EQ(m.named_children()[0].second->name(), "Tanh");
  EXPECT_TRUE(m.parameters().empty());
  m.unregister_module("b");
  EXPECT_EQ(m.named_children().size(), 1u);
  expect_error([&] { m.replace_module("zz", std::make_shared<nn::ReLU>()); }, {"replace_module", "'zz'"});
  expect_error([&] { m.unregister_module("zz"); }, {"unregister_module", "'zz'"});
}

TEST(ModuleName, DefaultIsTheUnqualifiedClassName) {
  EXPECT_EQ(nn::Module().name(), "Module");
  EXPECT_EQ(Plain().name(), "Plain");  // declared in an anonymous namespace
  EXPECT_EQ(Block<int>().name(), "Block<int>");
  EXPECT_EQ(Plain().str(), "Plain()");
  // Through a base reference: the dynamic type's name.
  std::unique_ptr<nn::Module> m = std::make_unique<Plain>();
  EXPECT_EQ(m->name(), "Plain");
}

// ---- traversal ----------------------------------------------------------------------------------

// root
//  |- a: Sequential(0: x = Linear, 1: y = ReLU)
//  |- b: x again (shared)
//  |- c: ModuleList(0: z = Tanh)
//  '- d: c again
struct Tree {
  std::shared_ptr<nn::Module> root = std::make_shared<nn::Module>();
  std::shared_ptr<nn::Linear> x = std::make_shared<nn::Linear>(1, 1);
  std::shared_ptr<nn::ReLU> y = std::make_shared<nn::ReLU>();
  std::shared_ptr<nn::Tanh> z = std::make_shared<nn::Tanh>();
  std::shared_ptr<nn::Sequential> a = std::make_shared<nn::Sequential>(x, y);
  std::shared_ptr<nn::ModuleList> c = std::make_shared<nn::ModuleList>(z);
  Tree() {
    root->register_module("a", a);
    root->register_module("b", x);
    root->register_module("c", c);
    root->register_module("d", c);
  }
};

TEST(ModuleTraversal, NamedModulesIsPreOrderAndListsEachModuleOnce) {
  Tree t;
  nn::NamedModules all = t.root->named_modules();
  EXPECT_EQ(names(all), (std::vector<std::string>{"", "a", "a.0", "a.1", "c", "c.0"}));
  std::vector<nn::Module*> expected{t.root.get(), t.a.get(), t.x.get(), t.y.get(), t.c.get(), t.z.get()};
  std::vector<std::shared_ptr<nn::Module>> mods = t.root->modules();
  ASSERT_EQ(mods.size(), expected.size());
  for (size_t i = 0; i < mods.size(); ++i) EXPECT_EQ(mods[i].get(), expected[i]) << i;
  EXPECT_EQ(names(t.a->named_modules("model.a")), (std::vector<std::string>{"model.a", "model.a.0", "model.a.1"}));
  // The root's entry shares ownership when the root is held by a shared_ptr.
  EXPECT_EQ(all[0].second, t.root);
  // Every name is still there for parameters (tied weights), each tensor once in parameters().
  EXPECT_EQ(names(t.root->named_parameters()),
            (std::vector<std::string>{"a.0.weight", "a.0.bias", "b.weight", "b.bias"}));
  EXPECT_EQ(t.root->parameters().size(), 2u);
}

TEST(ModuleTraversal, ChildrenDeduplicatesDirectChildren) {
  Tree t;
  EXPECT_EQ(t.root->named_children().size(), 4u);
  std::vector<std::shared_ptr<nn::Module>> kids = t.root->children();
  ASSERT_EQ(kids.size(), 3u);  // d is c again
  EXPECT_EQ(kids[0], t.a);
  EXPECT_EQ(kids[1], t.x);  // b: x is not a direct child before b
  EXPECT_EQ(kids[2], t.c);
}

TEST(ModuleTraversal, ApplyVisitsChildrenFirstLikePyTorch) {
  Tree t;
  std::vector<nn::Module*> order;
  t.root->apply([&](nn::Module& m) { order.push_back(&m); });
  // PyTorch: for module in self.children(): module.apply(fn); fn(self). children() de-duplicates
  // one level only, so x (reached as a.0 and as b) is visited twice and c (c and d) once.
  std::vector<nn::Module*> expected{t.x.get(), t.y.get(), t.a.get(), t.x.get(), t.z.get(), t.c.get(), t.root.get()};
  EXPECT_EQ(order, expected);
}

TEST(ModuleTraversal, WorksOnAModuleOnTheStack) {
  nn::Sequential seq(nn::Linear(2, 2), nn::ReLU());
  nn::NamedModules all = seq.named_modules();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].second.get(), &seq);
  EXPECT_EQ(all[0].second.use_count(), 0);  // non-owning: the stack owns it
  int linears = 0;
  seq.apply([&](nn::Module& m) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
      NoGradGuard no_grad;
      linear->weight.fill_(0.5);
      ++linears;
    }
  });
  EXPECT_EQ(linears, 1);
  expect_close(seq[0]->parameters()[0], {0.5, 0.5, 0.5, 0.5}, 0);
}

// A module inside its own subtree would make every walk (parameters, state_dict, named_modules,
// to, train, str) recurse until the stack overflows: every way of attaching a child refuses it,
// and leaves the tree as it was.
TEST(ModuleRegistration, RefusesAModuleInsideItsOwnSubtree) {
  auto root = std::make_shared<nn::Sequential>(nn::Linear(2, 2), nn::ReLU());
  expect_error([&] { root->register_module("self", root); },
               {"Sequential.register_module", "'self'", "contain itself", "Sequential itself"});
  expect_error([&] { root->push_back(root); }, {"Sequential.register_module", "'2'", "contain itself"});

  // A parent registered into a descendant, two levels down: the path to the parent is named.
  auto outer = std::make_shared<Plain>();
  auto middle = outer->register_module("middle", std::make_shared<nn::ModuleList>());
  auto inner = std::make_shared<nn::ModuleDict>();
  middle->push_back(inner);
  expect_error([&] { inner->insert("up", outer); },
               {"ModuleDict.register_module", "'up'", "(Plain)", "this ModuleDict is inside it, at 'middle.0'"});
  expect_error(
      [&] {
        inner->update({{"ok", std::make_shared<nn::ReLU>()}, {"up", middle}});
      },
      {"'up'", "(ModuleList)", "at '0'"});
  expect_error([&] { middle->extend({inner, outer}); }, {"ModuleList", "(Plain)", "at 'middle'"});
  expect_error([&] { middle->insert(0, outer); }, {"ModuleList.insert", "'0'", "(Plain)"});
  expect_error([&] { inner->replace_module("ok", outer); }, {"ModuleDict.replace_module", "'ok'", "(Plain)"});
  expect_error([&] { root->replace_module("0", root); }, {"Sequential.replace_module", "'0'"});

  // Nothing was attached: the walks end, and a refused insert kept the list in order.
  EXPECT_EQ(names(root->named_modules()), (std::vector<std::string>{"", "0", "1"}));
  EXPECT_EQ(names(outer->named_modules()), (std::vector<std::string>{"", "middle", "middle.0", "middle.0.ok"}));
  ASSERT_EQ(middle->size(), 1u);
  EXPECT_EQ((*middle)[0], inner);
  EXPECT_EQ(root->parameters().size(), 2u);
  EXPECT_EQ(outer->state_dict().size(), 0u);

  // A module on the stack, attached through a non-owning pointer to itself.
  nn::Sequential on_stack{nn::ReLU()};
  expect_error(
      [&] { on_stack.push_back(std::shared_ptr<nn::UnaryModule>(std::shared_ptr<nn::UnaryModule>(), &on_stack)); },
      {"contain itself"});

  // Sharing is not a cycle (PyTorch allows it): the same module twice, and a sibling subtree.
  auto shared = std::make_shared<nn::Linear>(2, 2);
  auto left = std::make_shared<nn::Sequential>(shared);
  auto right = std::make_shared<nn::Sequential>(shared, left);
  auto both = std::make_shared<nn::ModuleList>(left, right);
  both->push_back(shared);
  EXPECT_EQ(both->parameters().size(), 2u);
  EXPECT_EQ(both->named_modules().size(), 4u);
  EXPECT_EQ(both->state_dict().size(), 8u);
}

// ---- printing -----------------------------------------------------------------------------------

class WithExtra : public nn::Module {
 public:
  explicit WithExtra(std::string extra, bool child) : extra_(std::move(extra)) {
    if (child) register_module("fc", nn::Linear(1, 2, false));
  }

 protected:
  std::string extra_repr() const override { return extra_; }

 private:
  std::string extra_;
};

TEST(ModulePrinting, LikePyTorchRepr) {
  nn::Sequential model(nn::Linear(784, 512), nn::ReLU(), nn::Dropout(0.25), nn::Linear(512, 10));
  std::ostringstream os;
  os << model;
  EXPECT_EQ(os.str(),
            "Sequential(\n"
            "  (0): Linear(in_features=784, out_features=512, bias=true)\n"
            "  (1): ReLU()\n"
            "  (2): Dropout(p=0.25)\n"
            "  (3): Linear(in_features=512, out_features=10, bias=true)\n"
            ")");
  EXPECT_EQ(nn::Sequential().str(), "Sequential()");
  EXPECT_EQ(nn::Tanh().str(), "Tanh()");
  EXPECT_EQ(nn::Sigmoid().str(), "Sigmoid()");
  EXPECT_EQ(nn::GELU().str(), "GELU(approximate='none')");
  EXPECT_EQ(nn::SiLU().str(), "SiLU()");
  EXPECT_EQ(nn::Dropout().str(), "Dropout(p=0.5)");
}

TEST(ModulePrinting, NestingExtraLinesAndChildrenAsPyTorch) {
  // One extra_repr line and no children: inline. With children, or several lines: one per line.
  EXPECT_EQ(WithExtra("k=1", false).str(), "WithExtra(k=1)");
  EXPECT_EQ(WithExtra("k=1", true).str(),
            "WithExtra(\n"
            "  k=1\n"
            "  (fc): Linear(in_features=1, out_features=2, bias=false)\n"
            ")");
  EXPECT_EQ(WithExtra("a=1\nb=2", false).str(), "WithExtra(\n  a=1\n  b=2\n)");
  auto inner = std::make_shared<nn::Sequential>(nn::Linear(2, 2), nn::Tanh());
  nn::Sequential outer(inner, nn::Sigmoid());
  EXPECT_EQ(outer.str(),
            "Sequential(\n"
            "  (0): Sequential(\n"
            "    (0): Linear(in_features=2, out_features=2, bias=true)\n"
            "    (1): Tanh()\n"
            "  )\n"
            "  (1): Sigmoid()\n"
            ")");
}

TEST(ModulePrinting, ModuleListFoldsRepeatedChildren) {
  nn::ModuleList list(nn::Linear(2, 2), nn::Linear(2, 2), nn::ReLU(), nn::Linear(2, 2), nn::Linear(2, 3));
  EXPECT_EQ(list.str(),
            "ModuleList(\n"
            "  (0-1): 2 x Linear(in_features=2, out_features=2, bias=true)\n"
            "  (2): ReLU()\n"
            "  (3): Linear(in_features=2, out_features=2, bias=true)\n"
            "  (4): Linear(in_features=2, out_features=3, bias=true)\n"
            ")");
  EXPECT_EQ(nn::ModuleList().str(), "ModuleList()");
}

// ---- Sequential in one expression ----------------------------------------------------------------

TEST(SequentialBuild, VariadicFromValuesAndSharedPtrs) {
  manual_seed(1);
  nn::Sequential model(nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 10));
  EXPECT_EQ(model.size(), 3u);
  EXPECT_EQ(names(model.named_parameters()), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(model.forward(randn({2, 784})).sizes(), (Shape{2, 10}));

  auto shared = std::make_shared<nn::Linear>(4, 3);
  auto mixed = std::make_shared<nn::Sequential>(shared, nn::Tanh(), std::make_shared<nn::Linear>(3, 1));
  EXPECT_EQ((*mixed)[0], shared);  // a shared_ptr argument is shared, not copied
  EXPECT_EQ((*mixed)[1]->name(), "Tanh");

  // The braced list of shared_ptrs still works.
  nn::Sequential braced{std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::ReLU>()};
  EXPECT_EQ(braced.size(), 2u);
  // One Sequential argument copies; the copy shares the children.
  nn::Sequential copy(model);
  EXPECT_EQ(copy[0], model[0]);
  // Nesting goes through a shared_ptr.
  nn::Sequential nested(std::make_shared<nn::Sequential>(model), nn::ReLU());
  EXPECT_EQ(nested.size(), 2u);
  EXPECT_EQ(names(nested.named_parameters())[0], "0.0.weight");
}

TEST(SequentialBuild, ForwardFollowsReplacedChildren) {
  nn::Sequential model(nn::Linear(2, 2), nn::ReLU());
  model.replace_module("1", std::make_shared<nn::Sigmoid>());
  Tensor x = tensor<float>({-1, 2}, {1, 2});
  Tensor h = model[0]->forward(x);
  expect_close(model.forward(x), sigmoid(h), 1e-7);
  model.replace_module("1", std::make_shared<nn::Module>());
  expect_error([&] { model.forward(x); }, {"Sequential", "'1'", "Module", "UnaryModule"});
  expect_error([&] { model[1]; }, {"Sequential", "'1'"});
}

// ---- ModuleList ---------------------------------------------------------------------------------

TEST(ModuleList, RegistersHoldsIndexesAndIterates) {
  nn::Module owner;
  auto layers = owner.register_module("layers", nn::ModuleList(nn::Linear(3, 3), std::make_shared<nn::Tanh>()));
  layers->push_back(nn::Linear(3, 2));
  layers->extend({std::make_shared<nn::ReLU>()});
  EXPECT_EQ(layers->size(), 4u);
  EXPECT_EQ(names(owner.named_parameters()),
            (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias"}));
  std::vector<std::string> kinds;
  for (const std::shared_ptr<nn::Module>& m : *layers) kinds.push_back(m->name());
  EXPECT_EQ(kinds, (std::vector<std::string>{"Linear", "Tanh", "Linear", "ReLU"}));
  EXPECT_EQ(layers->at<nn::Linear>(2).weight.sizes(), (Shape{2, 3}));
  EXPECT_EQ(layers->ptr<nn::Tanh>(1), (*layers)[1]);
  expect_error([&] { (*layers)[4]; }, {"ModuleList", "index 4", "4 modules"});
  expect_error([&] { layers->at<nn::Linear>(1); }, {"ModuleList", "module 1", "Tanh", "not a Linear"});
}

TEST(ModuleList, InsertRenamesTheRest) {
  nn::ModuleList list(nn::Linear(1, 1), nn::Tanh());
  auto gelu = std::make_shared<nn::GELU>();
  list.insert(1, gelu);
  EXPECT_EQ(names(list.named_children()), (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(list[1], gelu);
  EXPECT_EQ(list[2]->name(), "Tanh");
  list.insert(3, std::make_shared<nn::ReLU>());  // at the end
  EXPECT_EQ(list[3]->name(), "ReLU");
  list.insert(0, std::make_shared<nn::Sigmoid>());
  EXPECT_EQ(list[0]->name(), "Sigmoid");
  EXPECT_EQ(names(list.named_parameters()), (std::vector<std::string>{"1.weight", "1.bias"}));
  expect_error([&] { list.insert(9, gelu); }, {"ModuleList.insert", "9"});
}

// ---- ModuleDict ---------------------------------------------------------------------------------

TEST(ModuleDict, KeysInInsertionOrderReplaceInPlace) {
  nn::Module owner;
  auto heads = owner.register_module(
      "heads", nn::ModuleDict({{"cls", std::make_shared<nn::Linear>(4, 3)}, {"act", std::make_shared<nn::ReLU>()}}));
  heads->insert("reg", nn::Linear(4, 1));
  EXPECT_EQ(heads->keys(), (std::vector<std::string>{"cls", "act", "reg"}));
  EXPECT_TRUE(heads->contains("act"));
  EXPECT_FALSE(heads->contains("zz"));
  heads->insert("cls", nn::Linear(4, 5));  // replaced in place, like PyTorch's __setitem__
  EXPECT_EQ(heads->keys(), (std::vector<std::string>{"cls", "act", "reg"}));
  EXPECT_EQ(heads->at<nn::Linear>("cls").weight.sizes(), (Shape{5, 4}));
  EXPECT_EQ(names(owner.named_parameters()),
            (std::vector<std::string>{"heads.cls.weight", "heads.cls.bias", "heads.reg.weight", "heads.reg.bias"}));
  EXPECT_EQ(heads->values().size(), 3u);
  std::vector<std::string> seen;
  for (const auto& [key, m] : *heads) seen.push_back(key + ":" + m->name());
  EXPECT_EQ(seen, (std::vector<std::string>{"cls:Linear", "act:ReLU", "reg:Linear"}));

  std::shared_ptr<nn::Module> act = heads->pop("act");
  EXPECT_EQ(act->name(), "ReLU");
  EXPECT_EQ(heads->size(), 2u);
  expect_error([&] { (*heads)["act"]; }, {"ModuleDict", "'act'", "'cls', 'reg'"});
  expect_error([&] { heads->pop("act"); }, {"ModuleDict", "'act'"});
  expect_error([&] { heads->at<nn::ReLU>("cls"); }, {"ModuleDict", "'cls'", "Linear", "not a ReLU"});
  expect_error([&] { heads->insert("a.b", nn::ReLU()); }, {"invalid name", "a.b"});
  heads->update({{"x", std::make_shared<nn::Tanh>()}});
  EXPECT_EQ(heads->size(), 3u);
  heads->clear();
  EXPECT_TRUE(heads->empty());
  EXPECT_TRUE(owner.parameters().empty());
}

// ---- activations --------------------------------------------------------------------------------

TEST(Activations, ValuesMatchTheFormulas) {
  std::vector<double> xs{-3.0, -0.5, 0.0, 0.7, 2.5};
  Tensor x = tensor<double>(xs);
  std::vector<double> t, s, g, silu_values;
  for (double v : xs) {
    silu_values.push_back(v / (1.0 + std::exp(-v)));  // PyTorch's silu
    t.push_back(std::tanh(v));
    s.push_back(1.0 / (1.0 + std::exp(-v)));
    g.push_back(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));  // PyTorch's GELU, approximate='none'
  }
  expect_close(nn::Tanh()(x), t, 1e-12);
  expect_close(nn::Sigmoid()(x), s, 1e-12);
  expect_close(nn::GELU()(x), g, 1e-12);
  expect_close(nn::SiLU()(x), silu_values, 1e-12);
}

TEST(Activations, GradcheckThroughTheModules) {
  nn::Sequential chain{nn::Tanh(), nn::GELU(),
                       nn::Sigmoid()};  // braces: chain(nn::Tanh(), ...) would declare a function
  auto result = autograd::gradcheck([&](const std::vector<Tensor>& in) { return chain.forward(in[0]); },
                                    {testing::leaf({3, 4}, 5, -2.0, 2.0)});
  EXPECT_TRUE(result.ok) << result.report;
}

// The container and apply() snippets of docs/modules.md, so they keep compiling and mean what the
// doc says.
TEST(DocsSnippets, ContainersAndApply) {
  nn::Sequential mlp(nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 10));  // values and/or shared_ptrs
  auto blocks = std::make_shared<nn::ModuleList>(nn::Linear(8, 8), nn::Tanh());
  blocks->insert(1, std::make_shared<nn::GELU>());  // renames the rest: 0 Linear, 1 GELU, 2 Tanh
  nn::ModuleDict heads({{"cls", std::make_shared<nn::Linear>(8, 3)}});
  heads.insert("cls", nn::Linear(8, 5));          // an existing key is replaced in place
  nn::Linear& cls = heads.at<nn::Linear>("cls");  // typed access; a wrong type or key throws
  EXPECT_EQ(mlp.size(), 3u);
  EXPECT_EQ((*blocks)[2]->name(), "Tanh");
  EXPECT_EQ(cls.weight.sizes(), (Shape{5, 8}));

  auto model = std::make_shared<nn::Sequential>(nn::Linear(2, 3), nn::ReLU(), nn::Linear(3, 1));
  model->apply([](nn::Module& m) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
      tapegrad::NoGradGuard no_grad;
      linear->bias.zero_();
    }
  });
  for (const auto& [name, t] : model->named_parameters())
    if (name.find("bias") != std::string::npos) expect_close(t, std::vector<double>(t.numel(), 0.0), 0);
}

}  // namespace
}  // namespace tapegrad
