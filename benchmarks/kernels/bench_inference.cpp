// Inference on the CPU (docs/inference.md): the forward of the named configurations under
// NoGradGuard and under InferenceMode side by side, the streaming step of examples/char_lstm's
// model (one character with the carried state, as --sample runs it), and one model shared by 1
// and 2 calling threads (each with one OpenMP thread, so the threads are the parallelism).
#include <benchmark/benchmark.h>

#include <memory>
#include <optional>

#include "models/named_configs.h"

using namespace tapegrad;
using namespace tapegrad::bench;

namespace {

enum Mode { kNoGrad = 0, kInference = 1 };

// The guard of a mode, open for the caller's scope.
struct ModeGuard {
  explicit ModeGuard(int64_t mode) {
    if (mode == kInference)
      inference.emplace();
    else
      no_grad.emplace();
  }
  std::optional<NoGradGuard> no_grad;
  std::optional<InferenceMode> inference;
};

const char* mode_name(int64_t mode) {
  return mode == kInference ? "inference" : "no_grad";
}

// examples/char_lstm's model as parts, so its state can be carried: Embedding -> LSTM -> Linear.
struct CharParts {
  explicit CharParts(const ModelShape& s, Generator* g)
      : embedding(s.num_classes, s.input_size, int64_t{0}, std::nullopt, 2.0, g),
        lstm(s.input_size, s.hidden_size, nn::LSTMOptions().num_layers(s.num_layers), g),
        head(s.hidden_size, s.num_classes, true, g) {}
  nn::Embedding embedding;
  nn::LSTM lstm;
  nn::Linear head;
};

void stream_step(benchmark::State& state) {
  const ModelShape& shape = named_config("char_lstm").shape;
  Generator g(0);
  CharParts model(shape, &g);
  ModeGuard guard(state.range(0));
  Tensor id = full({1, 1}, 5.0, kInt64), h, c;
  for (auto _ : state) {
    nn::LSTMOutput o = model.lstm.forward(model.embedding.forward(id), h, c);
    h = o.h_n;
    c = o.c_n;
    Tensor logits = model.head.forward(o.output.view({1, shape.hidden_size}));
    benchmark::DoNotOptimize(logits.data_ptr());
  }
  state.SetItemsProcessed(state.iterations());  // characters
  state.SetLabel(mode_name(state.range(0)));
}

void forward(benchmark::State& state, const NamedConfig* config, int64_t batch) {
  Generator g(0);
  std::shared_ptr<nn::UnaryModule> model = build_model(config->shape, &g);
  model->eval();
  const Tensor x = make_batches(config->shape, batch, 1, &g)[0].x;
  ModeGuard guard(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(model->forward(x).data_ptr());
  state.SetItemsProcessed(state.iterations() * batch);
  state.SetLabel(mode_name(state.range(0)));
}

// Every benchmark thread calls forward on the one model built before the threads start.
std::shared_ptr<nn::UnaryModule> g_shared;
Tensor g_shared_input;

void shared_forward(benchmark::State& state) {
  const int threads = get_num_threads();
  set_num_threads(1);
  {
    InferenceMode guard;
    for (auto _ : state) benchmark::DoNotOptimize(g_shared->forward(g_shared_input).data_ptr());
  }
  set_num_threads(threads);
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

int main(int argc, char** argv) {
  BENCHMARK(stream_step)->Name("stream_step/char_lstm")->Arg(kNoGrad)->Arg(kInference);
  for (const NamedConfig& c : named_configs()) {
    if (c.shape.kind == ModelKind::CharLm) continue;  // its forward is the stream step above
    for (int64_t batch : {int64_t{1}, c.batch_sizes.front()})
      benchmark::RegisterBenchmark(("forward/" + c.name + "/b" + std::to_string(batch)).c_str(), forward, &c, batch)
          ->Arg(kNoGrad)
          ->Arg(kInference);
  }
  // One model, 1 and 2 threads: items/s is forwards per second over all threads.
  for (const char* name : {"mlp_seed", "lstm_small"}) {
    benchmark::RegisterBenchmark((std::string("shared_forward/") + name + "/b1").c_str(),
                                 [name](benchmark::State& state) {
                                   if (state.thread_index() == 0) {
                                     Generator g(0);
                                     g_shared = build_model(named_config(name).shape, &g);
                                     g_shared->eval();
                                     g_shared_input = make_batches(named_config(name).shape, 1, 1, &g)[0].x;
                                   }
                                   shared_forward(state);
                                 })
        ->Threads(1)
        ->Threads(2)
        ->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("tapegrad_threads", std::to_string(get_num_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
