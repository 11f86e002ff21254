// tapegrad_compare: the named configurations trained by tapegrad and by LibTorch in one process,
// from the same initial weights (a safetensors file both sides read) on the same data, alternating
// between the two, on the same threads; prints ms per step, the ratio tapegrad/LibTorch, each side's
// GFLOP/s against an sgemm ceiling measured at the start of the run, both sides' losses, which must
// agree, and where each side's step goes (forward, backward, Adam); --mode inference times the
// forward alone and compares the outputs instead. Without LibTorch (or with --device cuda) it times
// tapegrad alone and leaves the weights, data and results in --out for
// benchmarks/compare/pytorch_compare.py.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cxxopts.hpp>
#include <filesystem>
#include <functional>
#include <sstream>

#include "common/adam_floor.h"
#include "common/core_exchange.h"
#include "common/step_timer.h"
#include "compare_report.h"
#include "models/named_configs.h"
#ifdef TAPEGRAD_COMPARE_LIBTORCH
#include "libtorch_side.h"
#endif

using namespace tapegrad;
using namespace tapegrad::bench;

namespace {

constexpr int kPool = 8;  // batches per configuration; step i trains on batch i mod kPool

struct Selection {
  const NamedConfig* config;
  int64_t batch;
};

// "all", or a comma-separated list of "name" (every batch of it) and "name:batch".
std::vector<Selection> select(const std::string& spec) {
  std::vector<Selection> out;
  if (spec == "all") {
    for (const NamedConfig& c : named_configs())
      for (int64_t b : c.batch_sizes) out.push_back({&c, b});
    return out;
  }
  std::stringstream list(spec);
  std::string item;
  while (std::getline(list, item, ',')) {
    size_t colon = item.find(':');
    const NamedConfig& c = named_config(item.substr(0, colon));
    if (colon == std::string::npos) {
      for (int64_t b : c.batch_sizes) out.push_back({&c, b});
    } else {
      out.push_back({&c, std::stoll(item.substr(colon + 1))});
    }
  }
  return out;
}

std::map<std::string, std::string> shape_metadata(const NamedConfig& c, int64_t batch) {
  const ModelShape& s = c.shape;
  std::map<std::string, std::string> m = {{"config", c.name},
                                          {"batch", std::to_string(batch)},
                                          {"lr", std::to_string(c.lr)},
                                          {"pool", std::to_string(kPool)},
                                          {"num_classes", std::to_string(s.num_classes)}};
  if (s.kind == ModelKind::Mlp) {
    std::string sizes;
    for (int64_t v : s.mlp_sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(v);
    m["kind"] = "mlp", m["mlp_sizes"] = sizes;
  } else {
    m["kind"] = s.kind == ModelKind::CharLm ? "char_lm" : "lstm", m["input_size"] = std::to_string(s.input_size);
    m["hidden_size"] = std::to_string(s.hidden_size), m["seq_len"] = std::to_string(s.seq_len);
    if (s.kind == ModelKind::CharLm) m["num_layers"] = std::to_string(s.num_layers);
  }
  return m;
}

// Writes <out>/<config>_b<batch>.weights.safetensors and .data.safetensors; returns the stem.
std::string write_inputs(const std::string& out_dir, const NamedConfig& c, int64_t batch, uint64_t seed) {
  const std::string stem = out_dir + "/" + c.name + "_b" + std::to_string(batch);
  Generator init(seed), data(seed + 1);
  auto model = build_model(c.shape, &init);
  save_safetensors(stem + ".weights.safetensors", model->state_dict(), shape_metadata(c, batch));
  StateDict tensors;
  std::vector<Batch> batches = make_batches(c.shape, batch, kPool, &data);
  for (size_t i = 0; i < batches.size(); ++i) {
    tensors.emplace_back("x." + std::to_string(i), batches[i].x);
    tensors.emplace_back("y." + std::to_string(i), batches[i].y);
    if (batches[i].lengths.defined()) tensors.emplace_back("lengths." + std::to_string(i), batches[i].lengths);
  }
  save_safetensors(stem + ".data.safetensors", tensors, shape_metadata(c, batch));
  return stem;
}

// The batches write_inputs saved: "x.<i>", "y.<i>" and, for CharLm, "lengths.<i>".
std::vector<Batch> read_batches(const std::string& path) {
  StateDict tensors = load_safetensors(path);
  std::vector<Batch> batches;
  for (auto& [name, t] : tensors) {
    const size_t dot = name.find('.');
    const std::string field = name.substr(0, dot);
    TG_CHECK(dot != std::string::npos && (field == "x" || field == "y" || field == "lengths"),
             "compare: unexpected tensor '", name, "' in ", path);
    const size_t index = std::stoul(name.substr(dot + 1));
    TG_CHECK(index < 4096, "compare: unexpected tensor '", name, "' in ", path);
    if (batches.size() <= index) batches.resize(index + 1);
    (field == "x" ? batches[index].x : field == "y" ? batches[index].y : batches[index].lengths) = t;
  }
  return batches;
}

// One side of the comparison: a step, a device synchronise, and the times of its blocks.
struct Contender {
  std::function<void()> step, sync;
  std::vector<double> per_step_ms;
};

// The side that runs `i`-th in round `round` of `count` sides: forwards in rounds 0 and 3 of every
// four, backwards in rounds 1 and 2 (ABBA), so that each side runs first as often as last.
size_t abba_side(int round, size_t i, size_t count) {
  return (round % 4 == 1 || round % 4 == 2) ? count - 1 - i : i;
}

// Two warm-up steps each, then rounds of equal blocks in ABBA order, so that a slow spell of the
// (shared) machine hits both sides alike. A block is at least block_s of the fastest side's steps:
// each side's first step of a block finds the caches holding the other sides' models (four
// mlp_seed sides with their Adam moments hold over 30 MB), which a training run never sees, so a
// short block adds a cold step to every few warm ones. Returns the steps each side ran.
int64_t alternate(std::vector<Contender*> sides, double budget_s, double block_s,
                  const std::function<void()>& after_first_step) {
  double slowest = 0, fastest = 1e300;
  for (Contender* s : sides) s->step();
  for (Contender* s : sides) s->sync();
  after_first_step();
  for (Contender* s : sides) {
    Stopwatch watch;
    s->step();
    s->sync();
    slowest = std::max(slowest, watch.seconds()), fastest = std::min(fastest, watch.seconds());
  }
  const int block = std::max(1, static_cast<int>(std::ceil(block_s / std::max(fastest, 1e-7))));
  int rounds = std::clamp(static_cast<int>(budget_s / (block * slowest)), 6, 100);
  rounds += rounds % 2;
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < sides.size(); ++i) {
      Contender* s = sides[abba_side(r, i, sides.size())];
      Stopwatch watch;
      for (int k = 0; k < block; ++k) s->step();
      s->sync();
      s->per_step_ms.push_back(1e3 * watch.seconds() / block);
    }
  }
  return 2 + static_cast<int64_t>(rounds) * block;
}

// One side of the split pass: a phased step (the side's step with a clock read after each phase)
// and one sample per block, the block's mean of each phase per step.
struct PhasedContender {
  std::function<StepPhases()> step;
  std::vector<StepPhases> samples;
};

// The phases of `block` phased steps of `side`, each as its mean per step: the statistic `alternate`
// takes of whole steps, so that a stall (a busy, shared machine) weighs on the split as on ms.
StepPhases block_of_phases(PhasedContender& side, int block) {
  StepPhases sum;
  for (int k = 0; k < block; ++k) {
    const StepPhases p = side.step();
    sum.forward_ms += p.forward_ms, sum.backward_ms += p.backward_ms, sum.optimizer_ms += p.optimizer_ms;
  }
  return {sum.forward_ms / block, sum.backward_ms / block, sum.optimizer_ms / block};
}

// The split pass: blocks as long as the timing's (so that each block starts as cold), a quarter of
// the budget per side, whole ABBA cycles of 4 to 40 rounds. Run after the timing of whole steps, whose
// medians stay the step times. Returns the phased steps per side.
int64_t alternate_phases(std::vector<PhasedContender*> sides, double fastest_ms, double slowest_ms, double budget_s,
                         double block_s) {
  if (sides.empty() || fastest_ms <= 0) return 0;
  const int block = std::max(1, static_cast<int>(std::ceil(block_s * 1e3 / fastest_ms)));
  const int wanted = static_cast<int>(budget_s / 4 / (block * slowest_ms * 1e-3));
  const int rounds = (std::clamp(wanted, 4, 40) + 3) / 4 * 4;
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < sides.size(); ++i) {
      PhasedContender* s = sides[abba_side(r, i, sides.size())];
      s->samples.push_back(block_of_phases(*s, block));
    }
  return static_cast<int64_t>(rounds) * block;
}

SideResult summarise(const Contender& c, double first_loss, double check_loss, double final_loss) {
  SideResult r;
  r.median_ms = median(c.per_step_ms);
  r.min_ms = *std::min_element(c.per_step_ms.begin(), c.per_step_ms.end());
  r.first_loss = first_loss, r.check_loss = check_loss, r.final_loss = final_loss;
  return r;
}

// Trains one configuration on both sides from the files written for it; returns its row.
CompareRow compare_one(const NamedConfig& c, int64_t batch, Device device, bool with_tapegrad, bool with_libtorch,
                       bool autocast, double budget_s, double block_s, const std::string& out_dir, uint64_t seed) {
  const std::string stem = write_inputs(out_dir, c, batch, seed);
  // Both sides start from what the files hold.
  const StateDict weights = load_safetensors(stem + ".weights.safetensors");
  const std::vector<Batch> batches = read_batches(stem + ".data.safetensors");

  TrainingRun ours(c.shape, weights, batches, device, c.lr);
  Tensor our_loss;
  double our_first = 0, their_first = 0, our_check = 0, their_check = 0;
  int our_steps = 0, their_steps = 0;
  Contender tg{[&] {
                 our_loss = ours.step();
                 if (++our_steps == kCheckStep) our_check = our_loss.item();  // one synchronise, once
               },
               [&] { ours.synchronize(); },
               {}};
  std::vector<Contender*> sides;
  if (with_tapegrad) sides.push_back(&tg);
  // --autocast bf16: the same model and data again, each step under CPU autocast (amp/autocast.h).
  std::unique_ptr<TrainingRun> ours_bf16;
  Tensor our_bf16_loss;
  double bf16_first = 0, bf16_check = 0;
  int bf16_steps = 0;
  Contender tg_bf16{[&] {
                      {
                        amp::AutocastGuard autocast_guard(kCPU, kBFloat16);
                        our_bf16_loss = ours_bf16->step();
                      }
                      if (++bf16_steps == kCheckStep) bf16_check = our_bf16_loss.item();
                    },
                    [&] { ours_bf16->synchronize(); },
                    {}};
  if (with_tapegrad && autocast) {
    ours_bf16 = std::make_unique<TrainingRun>(c.shape, weights, batches, device, c.lr);
    sides.push_back(&tg_bf16);
  }
#ifdef TAPEGRAD_COMPARE_LIBTORCH
  std::unique_ptr<LibTorchRun> theirs;
  Contender lt{[&] {
                 theirs->step();
                 if (++their_steps == kCheckStep) their_check = theirs->last_loss();
               },
               [] {},
               {}};
  if (with_libtorch) {
    theirs = std::make_unique<LibTorchRun>(c.shape, weights, batches, c.lr);
    sides.push_back(&lt);
  }
  std::unique_ptr<LibTorchRun> theirs_bf16;
  double their_bf16_first = 0, their_bf16_check = 0;
  int their_bf16_steps = 0;
  Contender lt_bf16{[&] {
                      theirs_bf16->step();
                      if (++their_bf16_steps == kCheckStep) their_bf16_check = theirs_bf16->last_loss();
                    },
                    [] {},
                    {}};
  if (with_libtorch && autocast) {
    theirs_bf16 = std::make_unique<LibTorchRun>(c.shape, weights, batches, c.lr, /*autocast_bf16=*/true);
    sides.push_back(&lt_bf16);
  }
#else
  (void)with_libtorch;
#endif
  CompareRow row;
  row.config = c.name;
  row.batch = batch;
  row.gemm_flops_per_example = median_batch_gemm_flops_per_example(c.shape, batches);
  row.steps = alternate(sides, budget_s, block_s, [&] {
    if (with_tapegrad) our_first = our_loss.item();
    if (ours_bf16) bf16_first = our_bf16_loss.item();
#ifdef TAPEGRAD_COMPARE_LIBTORCH
    if (theirs) their_first = theirs->last_loss();
    if (theirs_bf16) their_bf16_first = theirs_bf16->last_loss();
#endif
  });
  if (with_tapegrad) row.tapegrad = summarise(tg, our_first, our_check, our_loss.item());
  if (ours_bf16) row.tapegrad_bf16 = summarise(tg_bf16, bf16_first, bf16_check, our_bf16_loss.item());
#ifdef TAPEGRAD_COMPARE_LIBTORCH
  if (theirs) row.libtorch = summarise(lt, their_first, their_check, theirs->last_loss());
  if (theirs_bf16) row.libtorch_bf16 = summarise(lt_bf16, their_bf16_first, their_bf16_check, theirs_bf16->last_loss());
#endif
  (void)their_first;

  // The split of the f32 steps, after the losses above were read: these steps train the models on.
  PhasedContender tg_phased{[&] {
                              StepPhases phases;
                              our_loss = ours.phased_step(&phases);
                              return phases;
                            },
                            {}};
  std::vector<PhasedContender*> phased;
  double fastest_ms = 1e300, slowest_ms = 0;
  auto add_phased = [&](PhasedContender* side, double median_ms) {
    phased.push_back(side);
    fastest_ms = std::min(fastest_ms, median_ms), slowest_ms = std::max(slowest_ms, median_ms);
  };
  if (with_tapegrad) add_phased(&tg_phased, row.tapegrad.median_ms);
#ifdef TAPEGRAD_COMPARE_LIBTORCH
  PhasedContender lt_phased{[&] { return theirs->phased_step(); }, {}};
  if (theirs) add_phased(&lt_phased, row.libtorch->median_ms);
#endif
  row.phase_steps = alternate_phases(phased, fastest_ms, slowest_ms, budget_s, block_s);
  if (with_tapegrad) row.tapegrad_phases = median_phases(tg_phased.samples);
#ifdef TAPEGRAD_COMPARE_LIBTORCH
  if (theirs) row.libtorch_phases = median_phases(lt_phased.samples);
#endif
  if (with_tapegrad && device == kCPU) {  // what any Adam must take over these parameters here
    int64_t parameters = 0;
    for (const Tensor& p : ours.model().parameters()) parameters += p.numel();
    row.optimizer_floor_ms = adam_memory_floor_ms(parameters, get_num_threads());
  }
  return row;
}

// --mode inference: each side's forward alone (tapegrad under InferenceMode, LibTorch under
// torch::InferenceMode, both models in eval()) on the same weights and batches, timed like
// compare_one's steps. The outputs of every batch of the pool are compared twice: before the timing,
// on each side's first calls, and after it, once the tapegrad LSTM keeps its packed weights across
// calls (Note [inference layouts]), so that a stale kept layout would show as a mismatch.
CompareRow infer_one(const NamedConfig& c, int64_t batch, Device device, bool with_tapegrad, bool with_libtorch,
                     double budget_s, double block_s, const std::string& out_dir, uint64_t seed) {
  const std::string stem = write_inputs(out_dir, c, batch, seed);
  const StateDict weights = load_safetensors(stem + ".weights.safetensors");
  const std::vector<Batch> batches = read_batches(stem + ".data.safetensors");

  // The model and its batches on the device; its optimiser is never stepped.
  TrainingRun ours(c.shape, weights, batches, device, c.lr);
  ours.model().eval();
  auto our_forward = [&](size_t i) {
    InferenceMode inference;
    return model_output(c.shape, ours.model(), ours.batches()[i]);
  };
  Tensor our_output;  // the latest forward's, held like the training loss so it is freed outside the block too
  size_t our_calls = 0;
  Contender tg{[&] { our_output = our_forward(our_calls++ % ours.batches().size()); }, [&] { ours.synchronize(); }, {}};
  std::vector<Contender*> sides;
  if (with_tapegrad) sides.push_back(&tg);
  CompareRow row;
  row.config = c.name;
  row.batch = batch;
  row.gemm_flops_per_example = median_batch_gemm_flops_per_example(c.shape, batches, /*forward_only=*/true);
#ifdef TAPEGRAD_COMPARE_LIBTORCH
  std::unique_ptr<LibTorchRun> theirs;
  Contender lt{[&] { theirs->infer(); }, [] {}, {}};
  if (with_libtorch) {
    theirs = std::make_unique<LibTorchRun>(c.shape, weights, batches, c.lr);
    sides.push_back(&lt);
  }
  auto compare_outputs = [&] {
    if (!with_tapegrad || !theirs) return;
    OutputDifference& d = row.outputs ? *row.outputs : row.outputs.emplace();
    for (size_t i = 0; i < batches.size(); ++i) {
      const Tensor a = our_forward(i).cpu().contiguous();
      const Tensor b = theirs->output_of(i);
      TG_CHECK(a.sizes() == b.sizes() && a.dtype() == kFloat32, "compare: ", c.name, " batch ", batch,
               ": tapegrad's output ", shape_str(a.sizes()), " ", a.dtype(), ", LibTorch's ", shape_str(b.sizes()));
      d.add(a.data<float>(), b.data<float>(), a.numel());
    }
  };
#else
  (void)with_libtorch;
  auto compare_outputs = [] {};
#endif
  compare_outputs();
  row.steps = alternate(sides, budget_s, block_s, [] {});
  compare_outputs();
  if (with_tapegrad) row.tapegrad = summarise(tg, 0, 0, 0);
#ifdef TAPEGRAD_COMPARE_LIBTORCH
  if (theirs) row.libtorch = summarise(lt, 0, 0, 0);
#endif
  return row;
}

// The step split table, a note for each side whose Adam takes a large share of its step (whichever
// side), and what the columns are.
void print_phase_split(const CompareReport& report) {
  const std::string table = format_phase_table(report);
  if (table.empty()) return;
  std::printf(
      "\nstep split (ms per step in each phase; N phased steps per side after the timing above, in ABBA "
      "blocks, each phase's median block):\n%s",
      table.c_str());
  for (const std::string& remark : phase_remarks(report)) std::printf("%s\n", remark.c_str());
  std::printf(
      "fwd: forward + cross-entropy; bwd: gradients to none + backward; opt: Adam step; opt floor: Adam's reads "
      "and writes\nalone over the model's parameters (common/adam_floor.h), less than which no Adam step takes "
      "once they outgrow the caches;\nsum: of the three medians, so it can differ from ms above, which times "
      "whole steps without clock reads;\nfwd/bwd/opt %%: each phase's share of sum. A note names a side whose Adam "
      "takes over %.0f%% of its step and %.0f points "
      "more than the other side's (or over it, timed alone).\n",
      100 * kOptimizerRemarkShare, 100 * kOptimizerRemarkMargin);
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options cli("tapegrad_compare", "Times the named configurations in tapegrad and LibTorch, alternating.");
  cli.add_options()("threads", "CPU threads for both sides (0: OpenMP's default)",
                    cxxopts::value<int>()->default_value("0"))("configs", "all, or a list like mlp_seed,lstm_small:16",
                                                               cxxopts::value<std::string>()->default_value("all"))(
      "budget", "seconds of timed steps per side and configuration", cxxopts::value<double>()->default_value("3"))(
      "block-ms", "each side runs blocks of at least this many ms of steps before the next side runs",
      cxxopts::value<double>()->default_value("20"))(
      "device", "device of the tapegrad side (LibTorch runs on the CPU only)",
      cxxopts::value<std::string>()->default_value("cpu"))("out", "folder for the weights, data and results.json",
                                                           cxxopts::value<std::string>()->default_value("compare_out"))(
      "seed", "seed of the initial weights (the data uses seed + 1)", cxxopts::value<uint64_t>()->default_value("0"))(
      "no-libtorch", "time tapegrad alone (--side tapegrad)")(
      "side", "both, tapegrad or libtorch: which sides train (one side alone gives that side's peak RSS)",
      cxxopts::value<std::string>()->default_value("both"))("no-ceiling",
                                                            "skip measuring the sgemm ceiling (about a second)")(
      "autocast", "off, or bf16: also time each side's step under CPU autocast to bfloat16 (the products in bf16)",
      cxxopts::value<std::string>()->default_value("off"))(
      "mode",
      "train: time whole training steps and compare the losses; inference: time the model's forward alone, each "
      "side in its inference mode with the model in eval(), and compare the outputs of every batch, which agree "
      "when max|tg - lt| <= 1e-5 * max(1, max|lt|)",
      cxxopts::value<std::string>()->default_value("train"))("h,help", "this help");
  try {
    cxxopts::ParseResult args = cli.parse(argc, argv);
    if (args.count("help")) {
      std::printf("%s\n", cli.help().c_str());
      return 0;
    }
    const int threads = args["threads"].as<int>() > 0 ? args["threads"].as<int>() : get_num_threads();
    set_num_threads(threads);
    const Device device(args["device"].as<std::string>());
    const std::string side = args.count("no-libtorch") ? "tapegrad" : args["side"].as<std::string>();
    TG_CHECK(side == "both" || side == "tapegrad" || side == "libtorch", "compare: --side must be both, tapegrad or ",
             "libtorch, got '", side, "'");
    const bool with_tapegrad = side != "libtorch";
    const std::string autocast_flag = args["autocast"].as<std::string>();
    TG_CHECK(autocast_flag == "off" || autocast_flag == "bf16", "compare: --autocast must be off or bf16, got '",
             autocast_flag, "'");
    const bool autocast = autocast_flag == "bf16";
    const CompareMode mode = parse_mode(args["mode"].as<std::string>());
    const bool inference = mode == CompareMode::Inference;
    TG_CHECK(!(autocast && inference), "compare: --autocast bf16 times training steps; it does not combine with ",
             "--mode inference");
    const double block_s = args["block-ms"].as<double>() / 1e3;
    TG_CHECK(block_s > 0, "compare: --block-ms must be positive, got ", args["block-ms"].as<double>());
    TG_CHECK(!autocast || device.is_cpu(), "compare: --autocast bf16 is CPU autocast; the tapegrad side runs on ",
             device.str());
    const std::string out_dir = args["out"].as<std::string>();
    std::filesystem::create_directories(out_dir);

    CompareReport report;
    report.device = device.str();
    report.sides = side;
    report.mode = mode;
#ifdef TAPEGRAD_COMPARE_LIBTORCH
    const bool with_libtorch = device.is_cpu() && side != "tapegrad";
    if (with_libtorch) {
      libtorch_set_threads(threads);
      LibTorchInfo info = libtorch_info();
      report.libtorch = "LibTorch " + info.version + ", " + info.blas + "; " + info.parallel_info;
    } else {
      report.libtorch =
          "not run (" + std::string(device.is_cpu() ? "--side tapegrad" : "LibTorch here is CPU-only") + ")";
    }
#else
    const bool with_libtorch = false;
    TG_CHECK(with_tapegrad, "compare: --side libtorch needs a build with LibTorch");
    report.libtorch = "not built: CMake found no LibTorch (install libtorch-dev, or run tools/run_compare.sh)";
#endif
    report.system = system_info();
    std::printf("tapegrad_compare on %s\n%s", device.str().c_str(), describe(report.system).c_str());
    std::printf("libtorch: %s\n", report.libtorch.c_str());
    if (inference)
      std::printf("mode: inference (the forward alone, tapegrad::InferenceMode and torch::InferenceMode, eval())\n");
    std::fflush(stdout);
    // Measured here, on the threads and the (shared) machine of this very run, so that the percentages
    // are not against a figure taken on another day or under another load.
    if (args.count("no-ceiling")) {
      std::printf("sgemm ceiling: not measured (--no-ceiling)\n");
    } else if (!device.is_cpu()) {
      std::printf("sgemm ceiling: not measured (a CPU figure; the tapegrad side runs on %s)\n", device.str().c_str());
    } else {
      const SgemmCeiling& c = report.ceiling.emplace(measure_sgemm_ceiling(2048, 5, autocast));
      std::printf(
          "sgemm ceiling, %d threads: OpenBLAS %.0f GFLOP/s, tapegrad matmul %.0f GFLOP/s (%lld^3, best of %d)\n",
          c.threads, c.openblas_gflops, c.tapegrad_gflops, static_cast<long long>(c.n), c.calls);
      if (autocast)
        std::printf(
            "bf16 products, %d threads: tapegrad matmul of bf16 tensors %.0f GFLOP/s, under autocast from f32 %.0f "
            "(%s kernel)\n",
            c.threads, c.tapegrad_bf16_operands_gflops, c.tapegrad_bf16_gflops, amp::cpu_bf16_product_kernel());
    }
    std::printf("\n");
    std::fflush(stdout);

    const char* unit = inference ? "forwards" : "steps";
    std::printf("blocks of at least %.0f ms of %s per side, in ABBA order\n", block_s * 1e3, unit);
    for (const Selection& sel : select(args["configs"].as<std::string>())) {
      try {
        const double budget = args["budget"].as<double>();
        const uint64_t seed = args["seed"].as<uint64_t>();
        const double exchange_before = device.is_cpu() ? core_exchange_ns() : 0.0;
        report.rows.push_back(inference ? infer_one(*sel.config, sel.batch, device, with_tapegrad, with_libtorch,
                                                    budget, block_s, out_dir, seed)
                                        : compare_one(*sel.config, sel.batch, device, with_tapegrad, with_libtorch,
                                                      autocast, budget, block_s, out_dir, seed));
        CompareRow& done = report.rows.back();
        if (exchange_before > 0) {
          done.core_exchange_ns_before = exchange_before;
          done.core_exchange_ns_after = core_exchange_ns();
        }
        std::printf("  %-12s batch %5lld: %lld %s on each side", sel.config->name.c_str(),
                    static_cast<long long>(sel.batch), static_cast<long long>(done.steps), unit);
        if (done.phase_steps > 0) std::printf(", then %lld phased", static_cast<long long>(done.phase_steps));
        if (done.core_exchange_ns_before > 0)
          std::printf("; threads 0-1 round trip %.0f ns before, %.0f after (%s)", done.core_exchange_ns_before,
                      done.core_exchange_ns_after,
                      core_exchange_state(std::max(done.core_exchange_ns_before, done.core_exchange_ns_after)));
        std::printf("\n");
      } catch (const std::exception& e) {  // e.g. a kernel the CUDA backend does not have yet
        std::printf("  %-12s batch %5lld: failed: %s\n", sel.config->name.c_str(), static_cast<long long>(sel.batch),
                    e.what());
      }
      std::fflush(stdout);
    }

    if (report.ceiling) {  // read again after the rows; the percentages use the better reading
      const SgemmCeiling again = measure_sgemm_ceiling(report.ceiling->n, 5, autocast);
      std::printf("\nsgemm ceiling again after the rows: OpenBLAS %.0f GFLOP/s, tapegrad matmul %.0f GFLOP/s",
                  again.openblas_gflops, again.tapegrad_gflops);
      if (autocast)
        std::printf("; bf16 operands %.0f, autocast %.0f", again.tapegrad_bf16_operands_gflops,
                    again.tapegrad_bf16_gflops);
      report.ceiling = best_of(*report.ceiling, again);
      std::printf("; the percentages use the better reading, %.0f GFLOP/s\n", report.ceiling->gflops());
    }
    std::printf("\n%s", format_table(report).c_str());
    if (autocast)
      std::printf(
          "\nautocast bf16 (the same steps under CPU autocast; bf16/f32: tapegrad's bf16 step over its f32 step):\n%s",
          format_autocast_table(report).c_str());
    if (inference)
      std::printf(
          "\nms: median time of one forward (the logits, no loss; both sides in inference mode, eval()); tg/lt: their "
          "ratio, below 1 tapegrad is faster;\nmin-min: the ratio of each side's fastest forward (less sensitive to a "
          "busy machine). N: forwards per side.\n"
          "GF/s: GEMM work of the forward alone (elementwise work left out, so a floor; char_lstm: the pool's "
          "median batch's real steps) x batch / median ms; "
          "tg %%ceil: tapegrad's GF/s\nas a percentage of the sgemm ceiling above (a 2048^3 product: small batches "
          "are matrix-vector work and cannot approach it).\n"
          "outputs: both sides' logits on every batch of the pool, before and after the timing; 'agree' when "
          "max|tg-lt| <= %.0e x max(1, max|lt|),\nelse MISMATCH and max|tg-lt| / max(1, max|lt|).\n",
          kOutputTolerance);
    else
      std::printf(
          "\nms: median time of one training step (forward, cross-entropy, backward, Adam); tg/lt: their ratio, below "
          "1 "
          "tapegrad is faster;\nmin-min: the ratio of each side's fastest step (less sensitive to a busy machine).\n"
          "GF/s: GEMM work of forward and backward (elementwise work left out, so a floor) x batch / median ms, the "
          "work of the pool's median batch\n(char_lstm: its real steps); tg %%ceil: tapegrad's GF/s as a percentage "
          "of the sgemm ceiling above (the faster of OpenBLAS and\ntapegrad matmul).\n"
          "loss1/loss%d/lossN: loss after step 1, step %d and the last (N-th) step, same weights and data on both "
          "sides; 'agree': steps 1 and %d\nwithin %.0e relative (the last step is shown, not checked: two float "
          "implementations drift apart over many steps).\n",
          kCheckStep, kCheckStep, kCheckStep, kLossTolerance);
    if (!inference) print_phase_split(report);
    // The whole process's high-water mark: run one --side at a time to read it as that side's.
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    report.peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
    std::printf("peak RSS of this process (sides: %s): %.0f MiB\n", side.c_str(), report.peak_rss_mib);
    write_json(report, out_dir + "/results.json");
    std::printf("wrote %s/results.json (and the weights and data each configuration started from)\n", out_dir.c_str());
    bool mismatch = false;
    for (const CompareRow& r : report.rows) mismatch |= r.loss_rel_diff() > kLossTolerance || !r.outputs_agree();
    return mismatch ? 2 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tapegrad_compare: %s\n", e.what());
    return 1;
  }
}
