// char_lstm: a character-level language model (Embedding -> LSTM -> Linear) trained on text
// records (by default Debian's fortunes, one fortune per record) in length buckets with truncated
// BPTT, Adam, gradient clipping and a warm-up + cosine learning rate; per epoch it prints train
// loss, validation loss and bits per character, characters/s and the padding share. --sample
// generates text from a checkpoint. --metrics / --tensorboard log the same numbers (and the mean
// gradient norm before clipping) per epoch and at every --eval-every line. --distributed: DDP
// over an MPI job, each rank training on its share of the records of every batch.
// --pipeline-stages N: the model cut by LSTM layers across the N processes of an MPI job, trained
// with micro-batches in the 1F1B schedule (char_lstm_pipeline.h).
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <string>

#include "amp_cli.h"
#include "char_lstm_model.h"
#include "char_lstm_pipeline.h"
#include "distributed_cli.h"
#include "example_util.h"
#include "metrics_cli.h"
#include "output_paths.h"
#include "profile_cli.h"

using namespace tapegrad;
using examples::UsageError;

namespace {

void add_options(cxxopts::Options& cli) {
  auto text = [](const char* value) { return cxxopts::value<std::string>()->default_value(value); };
  cli.add_options()("data", "text files or folders; records are separated by lines holding only '%'",
                    text("/usr/share/games/fortunes"))(
      "valid-fraction", "share of the records held out for validation, in [0, 1)", text("0.05"))(
      "limit-records", "use only the first N records of each split (0: all)", text("0"))(
      "epochs", "training epochs (>= 1)", text("10"))(
      "max-minutes", "stop cleanly (validate, checkpoint) after this much training time (0: no limit)", text("0"))(
      "batch-size", "records per batch (>= 1)", text("32"))("bptt", "truncated-BPTT chunk length in characters (>= 1)",
                                                            text("128"))(
      "bucketing", "on: batches of records of similar length; off: random batches", text("on"))(
      "batches-per-bucket", "bucket size in batches when bucketing (>= 1)", text("8"))(
      "embedding", "embedding size", text("64"))("hidden", "LSTM hidden size", text("256"))(
      "layers", "LSTM layers", text("2"))("dropout", "dropout between LSTM layers, in [0, 1)", text("0"))(
      "lr", "Adam's peak learning rate (> 0)", text("2e-3"))(
      "min-lr", "the cosine schedule's final learning rate, in [0, lr]", text("1e-4"))(
      "schedule", "cosine (linear warm-up, then cosine decay over all epochs) or constant", text("cosine"))(
      "warmup", "warm-up batches of the cosine schedule", text("200"))(
      "weight-decay", "Adam's L2 penalty on the weight matrices (not biases or the embedding)", text("0"))(
      "clip", "clip the gradients' total norm to this (0: no clipping)", text("1"))(
      "eval-every", "also validate every N batches (0: only after each epoch)", text("0"))(
      "seed", "random seed (initialisation, split, batches, dropout, sampling)", text("0"))(
      "device", "cpu, cuda, cuda:N or auto", text("auto"))("threads", "CPU threads (0: OpenMP's default)", text("0"))(
      "checkpoint", "save a safetensors checkpoint here after each epoch and when stopping", text(""))(
      "resume", "continue training from this checkpoint (or, with --sample, generate from it)", text(""))(
      "sample", "generate N characters from the --resume checkpoint (greedy and sampled) instead of training",
      text("0"))("temperature", "sampling temperature (> 0)", text("0.8"))(
      "prime", "text the generated characters continue", text(""))(
      "pipeline-stages",
      "cut the model by LSTM layers across the N processes of an MPI launch (mpirun -np N ... --pipeline-stages N)",
      text("0"))("micro-batches", "micro-batches per batch with --pipeline-stages (>= 1)", text("4"))("h,help",
                                                                                                      "this help");
  examples::add_metrics_options(cli);
  examples::add_distributed_options(cli);
  examples::add_amp_options(cli);
}

struct Options {
  std::string data, checkpoint, resume, schedule, prime;
  std::string metrics, metrics_csv, tensorboard;
  double valid_fraction, max_minutes, dropout, lr, min_lr, weight_decay, clip, temperature;
  int64_t limit_records, epochs, batch_size, bptt, batches_per_bucket, warmup, eval_every, sample;
  int64_t pipeline_stages, micro_batches;
  bool bucketing;
  examples::CharModelConfig model;
  bool embedding_given, hidden_given, layers_given;  // on the command line, not defaults
  // Also on the command line: a resume takes the checkpoint's value for each one not given.
  bool seed_given, valid_fraction_given, limit_records_given, bptt_given;
  bool batch_size_given, bucketing_given, batches_per_bucket_given;
  uint64_t seed;
};

Options read_options(const cxxopts::ParseResult& args) {
  using examples::int_flag;
  using examples::real_flag;
  constexpr int64_t kBig = int64_t{1} << 40;
  Options o;
  o.data = args["data"].as<std::string>();
  if (o.data.empty()) throw UsageError("--data: no path given");
  o.valid_fraction = real_flag(args, "valid-fraction", 0.0, 1.0);
  if (o.valid_fraction >= 1.0) throw UsageError("--valid-fraction: must be below 1");
  o.limit_records = int_flag(args, "limit-records", 0, kBig);
  o.epochs = int_flag(args, "epochs", 1, 1'000'000);
  o.max_minutes = real_flag(args, "max-minutes", 0.0, 1e7);
  o.batch_size = int_flag(args, "batch-size", 1, 1 << 20);
  o.bptt = int_flag(args, "bptt", 1, 1 << 24);
  const std::string bucketing = args["bucketing"].as<std::string>();
  if (bucketing != "on" && bucketing != "off") throw UsageError("--bucketing: '" + bucketing + "' is not on or off");
  o.bucketing = bucketing == "on";
  o.batches_per_bucket = int_flag(args, "batches-per-bucket", 1, kBig);
  o.model.embedding = int_flag(args, "embedding", 1, 1 << 16);
  o.model.hidden = int_flag(args, "hidden", 1, 1 << 16);
  o.model.layers = int_flag(args, "layers", 1, 64);
  o.embedding_given = args.count("embedding") > 0;
  o.hidden_given = args.count("hidden") > 0;
  o.layers_given = args.count("layers") > 0;
  o.seed_given = args.count("seed") > 0;
  o.valid_fraction_given = args.count("valid-fraction") > 0;
  o.limit_records_given = args.count("limit-records") > 0;
  o.bptt_given = args.count("bptt") > 0;
  o.batch_size_given = args.count("batch-size") > 0;
  o.bucketing_given = args.count("bucketing") > 0;
  o.batches_per_bucket_given = args.count("batches-per-bucket") > 0;
  o.dropout = o.model.dropout = real_flag(args, "dropout", 0.0, 1.0);
  if (o.dropout >= 1.0) throw UsageError("--dropout: must be below 1");
  o.lr = real_flag(args, "lr", 0.0, 1e6, true);
  o.min_lr = real_flag(args, "min-lr", 0.0, o.lr);
  o.schedule = args["schedule"].as<std::string>();
  if (o.schedule != "cosine" && o.schedule != "constant")
    throw UsageError("--schedule: '" + o.schedule + "' is not cosine or constant");
  o.warmup = int_flag(args, "warmup", 0, kBig);
  o.weight_decay = real_flag(args, "weight-decay", 0.0, 1e6);
  o.clip = real_flag(args, "clip", 0.0, 1e30);
  o.eval_every = int_flag(args, "eval-every", 0, kBig);
  o.seed = examples::uint64_flag(args, "seed");
  o.checkpoint = args["checkpoint"].as<std::string>();
  o.resume = args["resume"].as<std::string>();
  o.sample = int_flag(args, "sample", 0, int64_t{1} << 30);
  o.temperature = real_flag(args, "temperature", 0.0, 1e6, true);
  o.prime = args["prime"].as<std::string>();
  o.pipeline_stages = int_flag(args, "pipeline-stages", 0, 1 << 16);
  o.micro_batches = int_flag(args, "micro-batches", 1, 1 << 20);
  if (o.pipeline_stages > 0) {
    // What the pipelined loop does not do (yet): say so rather than ignore the flag.
    for (const char* flag : {"distributed", "checkpoint", "resume", "sample", "metrics", "metrics-csv", "tensorboard",
                             "eval-every", "max-minutes", "amp"})
      if (args.count(flag))
        throw UsageError(std::string("--pipeline-stages does not support --") + flag +
                         " yet (pipeline training runs whole epochs and prints its losses)");
    if (o.pipeline_stages > o.model.layers)
      throw UsageError("--pipeline-stages " + std::to_string(o.pipeline_stages) +
                       " needs at least as many --layers, got " + std::to_string(o.model.layers));
  } else if (args.count("micro-batches")) {
    throw UsageError("--micro-batches only applies with --pipeline-stages");
  }
  o.metrics = args["metrics"].as<std::string>();
  o.metrics_csv = args["metrics-csv"].as<std::string>();
  o.tensorboard = args["tensorboard"].as<std::string>();
  if (o.sample > 0 && !(o.metrics.empty() && o.metrics_csv.empty() && o.tensorboard.empty()))
    throw UsageError("--metrics, --metrics-csv and --tensorboard only apply to training, not --sample");
  if (o.sample > 0 && o.resume.empty()) throw UsageError("--sample needs a model: pass --resume CHECKPOINT");
  if (o.sample == 0 && (args.count("prime") || args.count("temperature")))
    throw UsageError(std::string("--") + (args.count("prime") ? "prime" : "temperature") +
                     " only applies with --sample");
  return o;
}

// Checkpoint metadata: where the run stood and the model's shape, so --sample and --resume need no
// architecture flags.
struct Position {
  int64_t epoch = 1;         // the epoch the state belongs to
  int64_t batches_done = 0;  // of that epoch (all of them when it completed)
};

int64_t metadata_int(const std::map<std::string, std::string>& metadata, const std::string& path,
                     const std::string& key, int64_t min, int64_t max) {
  auto it = metadata.find(key);
  if (it == metadata.end())
    throw Error("--resume: " + path + " has no '" + key + "' in its metadata (not a char_lstm checkpoint)");
  try {
    return examples::parse_int(key, it->second, min, max);
  } catch (const UsageError&) {
    throw Error("--resume: " + path + " records " + key + " '" + it->second + "', expected a whole number from " +
                std::to_string(min) + " to " + std::to_string(max));
  }
}

uint64_t metadata_uint64(const std::map<std::string, std::string>& metadata, const std::string& path,
                         const std::string& key) {
  auto it = metadata.find(key);
  if (it == metadata.end())
    throw Error("--resume: " + path + " has no '" + key + "' in its metadata (not a char_lstm checkpoint)");
  try {
    return examples::parse_uint64(key, it->second);
  } catch (const UsageError&) {
    throw Error("--resume: " + path + " records " + key + " '" + it->second + "', expected a non-negative integer");
  }
}

struct Checkpoint {
  std::map<std::string, std::string> metadata;
  StateDict model, optim;
  Vocab vocab;
  Position position;
  examples::CharModelConfig config;
};

Checkpoint read_checkpoint(const std::string& path) {
  std::map<std::string, std::string> metadata;
  SafetensorsDict tensors;
  try {
    metadata = load_safetensors_metadata(path);
    tensors = load_safetensors(path);
  } catch (const Error& e) {
    throw Error(std::string("--resume: ") + e.what());
  }
  Vocab vocab = [&] {
    try {
      return Vocab::from_state_dict(tensors);
    } catch (const Error& e) {
      throw Error("--resume: " + path + ": " + e.what());
    }
  }();
  Checkpoint ck{metadata, {}, {}, vocab, {}, {}};
  for (auto& [name, t] : tensors) {
    if (name.rfind("model.", 0) == 0)
      ck.model.emplace_back(name.substr(6), t);
    else if (name.rfind("optim.", 0) == 0)
      ck.optim.emplace_back(name.substr(6), t);
    else if (name.rfind("vocab.", 0) != 0)
      throw Error("--resume: " + path + " has an unexpected tensor '" + name + "'");
  }
  ck.position.epoch = metadata_int(metadata, path, "epoch", 1, 1'000'000);
  ck.position.batches_done = metadata_int(metadata, path, "batches_done", 0, std::numeric_limits<int64_t>::max());
  ck.config.vocab = ck.vocab.size();
  ck.config.embedding = metadata_int(metadata, path, "embedding", 1, 1 << 16);
  ck.config.hidden = metadata_int(metadata, path, "hidden", 1, 1 << 16);
  ck.config.layers = metadata_int(metadata, path, "layers", 1, 64);
  return ck;
}

// What a checkpoint records of the run that wrote it, beyond the model and the position: how its
// data was split and batched. A resume compares it with its own settings (adopt_saved_settings).
struct RunRecord {
  bool epoch_complete = false;  // batches_done is the whole epoch
  int64_t batches_per_epoch = 0, batch_size = 0, world_size = 1, bptt = 0, batches_per_bucket = 0, limit_records = 0;
  bool bucketing = true;
  uint64_t seed = 0;
  double valid_fraction = 0;
  std::string data_digest;  // of the training and validation records' ids (data_digest())
};

// FNV-1a over every record's length and ids, training records then validation records: the same
// text, split and limit give the same digest, and an edited corpus almost surely another.
std::string data_digest(const TextDataset& train_set, const TextDataset& valid_set) {
  uint64_t h = 14695981039346656037ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
  };
  for (const TextDataset* set : {&train_set, &valid_set}) {
    mix(uint64_t(set->size()));
    for (const std::vector<int64_t>& record : set->records()) {
      mix(record.size());
      for (int64_t id : record) mix(uint64_t(id));
    }
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016" PRIx64, h);
  return text;
}

std::string real_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

// The run record of a checkpoint to resume from. A checkpoint without one (written before char_lstm
// recorded it) still serves --sample, but a resume could not tell whether it continues the same run.
RunRecord read_run_record(const std::map<std::string, std::string>& metadata, const std::string& path) {
  for (const char* key : {"epoch_complete", "batches_per_epoch", "batch_size", "world_size", "bptt", "bucketing",
                          "batches_per_bucket", "limit_records", "seed", "valid_fraction", "data_digest"})
    if (metadata.count(key) == 0)
      throw Error("--resume: " + path + " has no '" + key +
                  "' in its metadata, so a resume cannot check that it continues the same run (a checkpoint of an "
                  "older char_lstm, or not one of char_lstm's); --sample can still read it");
  RunRecord r;
  r.epoch_complete = metadata_int(metadata, path, "epoch_complete", 0, 1) == 1;
  r.batches_per_epoch = metadata_int(metadata, path, "batches_per_epoch", 1, std::numeric_limits<int64_t>::max());
  r.batch_size = metadata_int(metadata, path, "batch_size", 1, 1 << 20);
  r.world_size = metadata_int(metadata, path, "world_size", 1, 1 << 20);
  r.bptt = metadata_int(metadata, path, "bptt", 1, 1 << 24);
  r.bucketing = metadata_int(metadata, path, "bucketing", 0, 1) == 1;
  r.batches_per_bucket = metadata_int(metadata, path, "batches_per_bucket", 1, int64_t{1} << 40);
  r.limit_records = metadata_int(metadata, path, "limit_records", 0, int64_t{1} << 40);
  r.seed = metadata_uint64(metadata, path, "seed");
  const std::string& fraction = metadata.at("valid_fraction");
  char* end = nullptr;
  r.valid_fraction = std::strtod(fraction.c_str(), &end);
  if (fraction.empty() || end != fraction.c_str() + fraction.size() || !(r.valid_fraction >= 0 && r.valid_fraction < 1))
    throw Error("--resume: " + path + " records valid_fraction '" + fraction + "', expected a number in [0, 1)");
  r.data_digest = metadata.at("data_digest");
  return r;
}

// A resume continues the run its checkpoint came from. Each setting below that is not on the command
// line takes the checkpoint's value. One given with another value is refused when it changes the
// data (split, limit, shuffling seed) or the optimisation steps (BPTT length); one that only changes
// the batching (batch size, bucketing, process count) is taken when the checkpoint completed its
// epoch (the next epoch is simply batched anew; returned as a note to print) and refused mid-epoch,
// where the saved position counts batches of the old batching and maps onto no batch of the new one.
std::vector<std::string> adopt_saved_settings(Options& o, const RunRecord& saved, const Position& position,
                                              int64_t world_size) {
  std::vector<std::string> notes;
  // True when the checkpoint's value should replace ours.
  auto differs = [&](const std::string& flag, bool given, bool different, const std::string& mine,
                     const std::string& theirs, bool batching_only) {
    if (!different) return false;
    if (!given) return true;
    const std::string what =
        (flag == "processes" ? "the run has " + mine + " processes, but the checkpoint's had " + theirs
                             : "--" + flag + " " + mine + " differs from the checkpoint's " + theirs);
    if (!batching_only)
      throw UsageError(what + "; a resume continues the same training, so leave the flag out (or give " + theirs + ")");
    if (!saved.epoch_complete)
      throw UsageError(what + ", and the checkpoint stopped mid-epoch (after batch " +
                       std::to_string(position.batches_done) + " of " + std::to_string(saved.batches_per_epoch) +
                       " in epoch " + std::to_string(position.epoch) +
                       "): that position cannot be mapped onto other batches. Resume with " + theirs +
                       ", or change it when resuming from a checkpoint of a completed epoch");
    notes.push_back("note: " + what + "; the checkpoint completed epoch " + std::to_string(position.epoch) +
                    " and the next epochs are batched with " + mine);
    return false;
  };
  if (differs("seed", o.seed_given, o.seed != saved.seed, std::to_string(o.seed), std::to_string(saved.seed), false))
    o.seed = saved.seed;
  if (differs("valid-fraction", o.valid_fraction_given, o.valid_fraction != saved.valid_fraction,
              examples::number_text(o.valid_fraction), examples::number_text(saved.valid_fraction), false))
    o.valid_fraction = saved.valid_fraction;
  if (differs("limit-records", o.limit_records_given, o.limit_records != saved.limit_records,
              std::to_string(o.limit_records), std::to_string(saved.limit_records), false))
    o.limit_records = saved.limit_records;
  if (differs("bptt", o.bptt_given, o.bptt != saved.bptt, std::to_string(o.bptt), std::to_string(saved.bptt), false))
    o.bptt = saved.bptt;
  if (differs("batch-size", o.batch_size_given, o.batch_size != saved.batch_size, std::to_string(o.batch_size),
              std::to_string(saved.batch_size), true))
    o.batch_size = saved.batch_size;
  if (differs("bucketing", o.bucketing_given, o.bucketing != saved.bucketing, o.bucketing ? "on" : "off",
              saved.bucketing ? "on" : "off", true))
    o.bucketing = saved.bucketing;
  if (differs("batches-per-bucket", o.batches_per_bucket_given, o.batches_per_bucket != saved.batches_per_bucket,
              std::to_string(o.batches_per_bucket), std::to_string(saved.batches_per_bucket), true))
    o.batches_per_bucket = saved.batches_per_bucket;
  differs("processes", true, world_size != saved.world_size, std::to_string(world_size),
          std::to_string(saved.world_size), true);
  return notes;
}

void save_checkpoint(const std::string& path, const examples::CharModel& model, const optim::Optimizer& opt,
                     const Vocab& vocab, const Position& position, const RunRecord& record) {
  StateDict state;
  for (auto& [name, t] : model.state_dict()) state.emplace_back("model." + name, t);
  for (auto& [name, t] : opt.state_dict()) state.emplace_back("optim." + name, t);
  for (auto& kv : vocab.state_dict()) state.push_back(kv);
  const Generator& rng = default_generator();
  save_safetensors(path, state,
                   {{"epoch", std::to_string(position.epoch)},
                    {"batches_done", std::to_string(position.batches_done)},
                    {"embedding", std::to_string(model.config().embedding)},
                    {"hidden", std::to_string(model.config().hidden)},
                    {"layers", std::to_string(model.config().layers)},
                    // Dropout draws from the default generator: restoring it continues the same stream.
                    {"rng_seed", std::to_string(rng.seed())},
                    {"rng_offset", std::to_string(rng.offset())},
                    {"epoch_complete", record.epoch_complete ? "1" : "0"},
                    {"batches_per_epoch", std::to_string(record.batches_per_epoch)},
                    {"batch_size", std::to_string(record.batch_size)},
                    {"world_size", std::to_string(record.world_size)},
                    {"bptt", std::to_string(record.bptt)},
                    {"bucketing", record.bucketing ? "1" : "0"},
                    {"batches_per_bucket", std::to_string(record.batches_per_bucket)},
                    {"limit_records", std::to_string(record.limit_records)},
                    {"seed", std::to_string(record.seed)},
                    {"valid_fraction", real_text(record.valid_fraction)},
                    {"data_digest", record.data_digest}});
}

int sample(const Options& o, Device device) {
  Checkpoint ck = read_checkpoint(o.resume);
  examples::CharModel model(ck.config);
  model.load_state_dict(ck.model);
  model.to(device);
  Generator generator(o.seed);
  std::printf("%s, epoch %" PRId64 ", %" PRId64 " ids; prime \"%s\"\n", o.resume.c_str(), ck.position.epoch,
              ck.vocab.size(), o.prime.c_str());
  // Each text with its speed: characters generated per second of generate(), prime included.
  auto timed = [&](double temperature) {
    const auto start = std::chrono::steady_clock::now();
    std::string text = examples::generate(model, ck.vocab, o.prime, o.sample, temperature, generator, device);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::make_pair(text, seconds);
  };
  for (double temperature : {0.0, o.temperature}) {
    const auto [text, seconds] = timed(temperature);
    if (temperature == 0)
      std::printf("--- greedy ---\n");
    else
      std::printf("--- sampled, temperature %g ---\n", temperature);
    std::printf("%s%s\n(%zu characters in %.1f ms: %.0f characters/s)\n", o.prime.c_str(), text.c_str(), text.size(),
                seconds * 1e3, seconds > 0 ? double(text.size()) / seconds : 0.0);
  }
  return 0;
}

// The first N records of a split (all of them for N = 0).
TextDataset first_records(const TextDataset& data, int64_t limit) {
  if (limit == 0 || limit >= data.size()) return data;
  return TextDataset({data.records().begin(), data.records().begin() + limit}, data.collate_options());
}

// One metrics record at a global batch step: the running train loss of the epoch so far, the
// validation loss and bits per character, throughput and learning rate; at an epoch's end also
// the padding share.
void log_metrics(observe::MetricsLogger& metrics, int64_t step, int64_t epoch, const examples::TrainTotals& totals,
                 double valid, double chars_per_s, double lr, bool epoch_end) {
  observe::Scalars scalars{{"epoch", double(epoch)},
                           {"train/loss", totals.mean_loss()},
                           {"valid/loss", valid},
                           {"valid/bpc", examples::bits(valid)},
                           {"lr", lr},
                           {"throughput/chars_per_s", chars_per_s}};
  if (totals.grad_norms > 0) scalars.emplace_back("train/grad_norm", totals.mean_grad_norm());
  if (epoch_end) scalars.emplace_back("train/padding_share", totals.padding.padding_share());
  metrics.log(step, scalars);
}

// A resumed epoch starts past the batches the checkpoint had already trained on.
class SkipBatches : public BatchSampler {
 public:
  SkipBatches(const BatchSampler& inner, int64_t skip) : inner_(inner), skip_(skip) {}
  int64_t size() const override { return inner_.size() - skip_; }
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const override {
    std::vector<std::vector<int64_t>> all = inner_.batches(epoch);
    return {all.begin() + skip_, all.end()};
  }

 private:
  const BatchSampler& inner_;
  int64_t skip_;
};

// --distributed. Every rank collates the same global batch (batch-size x ranks records) and takes
// the records rank, rank + N, ...: its share keeps the batch's length, so every rank cuts the same
// number of BPTT chunks and makes the same DDP all-reduces. Each chunk's loss is this rank's sum
// over its targets, scaled so that DDP's average over the ranks is the mean over the whole batch's
// targets: the gradient one process would take on the whole batch.
void train_batch_shard(examples::CharModel& model, optim::Optimizer& opt, const Example& batch, int64_t bptt,
                       double max_norm, Device device, examples::TrainTotals& totals,
                       const examples::DistributedRun& run, amp::GradScaler* scaler) {
  const int64_t records = batch.input.size(1);
  // A last batch of fewer records than ranks: the ranks left over repeat a record at weight 0.
  const bool idle = run.rank() >= records;
  std::vector<int64_t> columns;
  for (int64_t c = std::min<int64_t>(run.rank(), records - 1); c < records; c += run.size()) columns.push_back(c);
  const Tensor index = tensor(columns, {int64_t(columns.size())});
  const Example mine{index_select(batch.input, 1, index), index_select(batch.target, 1, index),
                     index_select(batch.lengths, 0, index)};
  const std::vector<Example> chunks = split_bptt(mine, bptt), whole = split_bptt(batch, bptt);
  if (!idle) totals.padding += padding_stats(mine);
  CrossEntropyOptions summed;
  summed.reduction = Reduction::Sum;
  Tensor h, c;
  for (size_t k = 0; k < chunks.size(); ++k) {
    examples::CharModel::Output out = model.forward(chunks[k].input.to(device), h, c, chunks[k].lengths);
    const int64_t vocab = model.config().vocab;
    const Tensor loss_sum = cross_entropy(out.logits.view({-1, vocab}), chunks[k].target.to(device).view({-1}), summed);
    const double weight = idle ? 0.0 : double(run.size()) / double(padding_stats(whole[k]).real);
    opt.zero_grad();
    examples::backward_clip_step(loss_sum * weight, opt, max_norm, totals, scaler);
    const double value = idle ? 0.0 : loss_sum.item();
    // Over all ranks, so that they all stop at the same chunk.
    if (const double all = run.sum(value); !std::isfinite(all))
      throw Error("the training loss became " + std::to_string(all) + " after " + std::to_string(totals.steps + 1) +
                  " steps; stopping (a lower --lr or --clip may help)");
    if (!idle) {
      totals.loss_sum += value;
      totals.targets += padding_stats(chunks[k]).real;
    }
    ++totals.steps;
    h = out.h_n.detach();
    c = out.c_n.detach();
  }
}

// The totals of all ranks (the gradient norms are the same on every rank).
examples::TrainTotals all_ranks(const examples::TrainTotals& mine, const examples::DistributedRun& run) {
  if (!run.enabled()) return mine;
  const std::vector<double> sums =
      run.sum({mine.loss_sum, double(mine.targets), double(mine.padding.real), double(mine.padding.padded)});
  examples::TrainTotals all = mine;
  all.loss_sum = sums[0];
  all.targets = int64_t(sums[1]);
  all.padding.real = int64_t(sums[2]);
  all.padding.padded = int64_t(sums[3]);
  return all;
}

// Validation loss (nats per character): each rank evaluates the records rank, rank + N, ...
double evaluate_all_ranks(examples::CharModel& model, const TextDataset& data, int64_t batch_size, int64_t bptt,
                          Device device, const examples::DistributedRun& run) {
  if (!run.enabled()) return examples::evaluate_nats(model, data, batch_size, bptt, device);
  std::vector<std::vector<int64_t>> records;
  for (int64_t i = run.rank(); i < data.size(); i += run.size()) records.push_back(data.record(i));
  double loss_sum = 0, targets = 0;
  if (!records.empty()) {
    const TextDataset mine(std::move(records), data.collate_options());
    targets = double(mine.num_tokens() - mine.size());  // every id but the first of each record
    loss_sum = examples::evaluate_nats(model, mine, batch_size, bptt, device) * targets;
  }
  const std::vector<double> sums = run.sum({loss_sum, targets});
  return sums[0] / sums[1];
}

// --data split by --valid-fraction and --seed, and its validation records (--limit-records), which
// must not be empty: both training loops read them this way.
TextCorpus open_corpus(const Options& o) {
  TextCorpusOptions corpus_options;
  corpus_options.valid_fraction = o.valid_fraction;
  corpus_options.seed = o.seed;
  return TextCorpus(o.data, corpus_options);
}
TextDataset validation_records(const Options& o, const TextCorpus& corpus) {
  TextDataset valid_set = first_records(corpus.valid(), o.limit_records);
  if (valid_set.size() == 0)
    throw Error("no validation records in " + o.data + " (" + std::to_string(corpus.num_records()) +
                " records, --valid-fraction " + examples::number_text(o.valid_fraction) + ")");
  return valid_set;
}

// Per batch: linear warm-up from lr/100, then cosine decay to min_lr at the last epoch's end.
std::function<double(int64_t)> lr_factor(const Options& o, int64_t total_steps) {
  const double floor_factor = o.min_lr / o.lr;
  const int64_t warmup = std::min(o.warmup, std::max<int64_t>(total_steps - 1, 0));
  const bool constant = o.schedule == "constant";
  return [=](int64_t step) {
    if (constant) return 1.0;
    if (step < warmup) return 0.01 + 0.99 * double(step) / double(warmup);
    const double progress = std::min(1.0, double(step - warmup) / double(std::max<int64_t>(total_steps - warmup, 1)));
    return floor_factor + (1 - floor_factor) * 0.5 * (1 + std::cos(M_PI * progress));
  };
}

// Validation loss (nats per character) through the pipeline: every record, in length order, as
// examples::evaluate_nats reads them on one process.
double evaluate_pipelined(examples::CharStage& stage, examples::CharPipeline& pipe, const TextDataset& data,
                          int64_t batch_size, int64_t bptt) {
  stage.train(false);
  BucketBatchSamplerOptions options;
  options.batch_size = batch_size;
  options.shuffle = false;
  BucketBatchSampler sampler(data.lengths(), options);
  double loss_sum = 0;
  int64_t targets = 0;
  for (const std::vector<int64_t>& indices : sampler.batches(0)) {
    const Example batch = data.get_batch(indices);
    const int64_t micro_batches = pipe.micro_batches_for(batch.input.size(1));
    stage.reset_state(micro_batches);
    for (const Example& chunk : split_bptt(batch, bptt)) {
      const int64_t real = padding_stats(chunk).real;
      if (real == 0) continue;
      loss_sum += pipe.run(chunk, micro_batches, false) * double(real);
      targets += real;
    }
  }
  stage.train(true);
  return targets > 0 ? loss_sum / double(targets) : 0.0;
}

// --pipeline-stages: this rank trains its stage of the model on every batch, all ranks in step.
// Same data, batches, initial weights, optimiser groups, clipping and schedule as one process, so
// the losses it prints are one process's to float rounding.
int train_pipelined(const Options& o, const examples::DistributedRun& run) {
  if (run.size() != o.pipeline_stages)
    throw UsageError("--pipeline-stages " + std::to_string(o.pipeline_stages) +
                     " needs as many processes (mpirun -np " + std::to_string(o.pipeline_stages) + "); this job has " +
                     std::to_string(run.size()));
  const TextCorpus corpus = open_corpus(o);
  const TextDataset train_set = first_records(corpus.train(), o.limit_records);
  const TextDataset valid_set = validation_records(o, corpus);
  examples::CharModelConfig config = o.model;
  config.vocab = corpus.vocab().size();
  // The whole model first, so that every stage starts from one process's initial weights.
  auto whole = std::make_unique<examples::CharModel>(config);
  examples::CharStage stage(*whole, run.rank(), run.size());
  whole.reset();
  examples::CharPipeline pipe(stage, run.group(), o.micro_batches);
  optim::Adam opt(stage.param_groups(o.weight_decay), optim::AdamOptions(o.lr));

  BucketBatchSamplerOptions sampler_options;
  sampler_options.batch_size = o.batch_size;
  sampler_options.bucketing = o.bucketing;
  sampler_options.batches_per_bucket = o.batches_per_bucket;
  sampler_options.seed = o.seed;
  BucketBatchSampler sampler(train_set.lengths(), sampler_options);
  const int64_t per_epoch = sampler.size();
  optim::LambdaLR schedule(opt, lr_factor(o, per_epoch * o.epochs));
  const std::vector<double> bytes = run.sum(std::vector<double>{double(stage.parameter_bytes())});
  std::printf("char_lstm pipelined over %d stages (%d processes), %" PRId64
              " micro-batches of each batch, 1F1B: %" PRId64 " train / %" PRId64 " validation records, %" PRId64
              " ids; embedding %" PRId64 ", %" PRId64 "-layer LSTM %" PRId64 ", batch %" PRId64 ", bptt %" PRId64
              ", %" PRId64 " batches/epoch; parameters %.0f bytes on stage 0, %.0f on all stages\n",
              run.size(), run.size(), o.micro_batches, train_set.size(), valid_set.size(), config.vocab,
              config.embedding, config.layers, config.hidden, o.batch_size, o.bptt, per_epoch,
              double(stage.parameter_bytes()), bytes[0]);
  std::fflush(stdout);
  const int64_t eval_batch = std::max<int64_t>(o.batch_size, 64);
  for (int64_t epoch = 1; epoch <= o.epochs; ++epoch) {
    DataLoader loader(train_set, sampler);
    loader.set_epoch(epoch);
    examples::TrainTotals totals;
    double idle = 0, steps_timed = 0;
    examples::Stopwatch clock;
    for (const Example& batch : loader) {
      totals.padding += padding_stats(batch);
      const int64_t micro_batches = pipe.micro_batches_for(batch.input.size(1));
      stage.reset_state(micro_batches);
      for (const Example& chunk : split_bptt(batch, o.bptt)) {
        const int64_t real = padding_stats(chunk).real;
        if (real == 0) continue;
        opt.zero_grad();
        const double loss = pipe.run(chunk, micro_batches, true);
        if (!std::isfinite(loss))
          throw Error("the training loss became " + std::to_string(loss) + " after " +
                      std::to_string(totals.steps + 1) + " steps; stopping (a lower --lr or --clip may help)");
        if (o.clip > 0) {
          totals.grad_norm_sum += pipe.clip_grad_norm(o.clip);
          ++totals.grad_norms;
        }
        opt.step();
        totals.loss_sum += loss * double(real);
        totals.targets += real;
        ++totals.steps;
        idle += 1 - pipe.last_times().compute / pipe.last_times().total;
        ++steps_timed;
      }
      schedule.step();
    }
    const double seconds = run.max(clock.seconds());
    const double valid = evaluate_pipelined(stage, pipe, valid_set, eval_batch, o.bptt);
    const double idle_mean = run.sum(idle / std::max(steps_timed, 1.0)) / run.size();
    std::printf("epoch %2" PRId64
                "  train loss %.4f  valid loss %.4f  bpc %.3f  %.0f chars/s  padding %.1f%%  "
                "lr %.2e  %.0f s  idle %.0f%% (bubble bound %.0f%%)\n",
                epoch, totals.mean_loss(), valid, examples::bits(valid),
                double(totals.targets) / std::max(seconds, 1e-9), 100 * totals.padding.padding_share(),
                schedule.get_last_lr().front(), seconds, 100 * idle_mean,
                100 * distributed::pipeline_bubble_bound(run.size(), o.micro_batches));
    std::fflush(stdout);
  }
  return 0;
}

int train(const Options& flags, Device device, const examples::DistributedRun& run, amp::GradScaler* scaler) {
  Options o = flags;
  std::optional<Checkpoint> ck;
  RunRecord saved;
  std::vector<std::string> resume_notes;
  if (!o.resume.empty()) {
    ck = read_checkpoint(o.resume);
    saved = read_run_record(ck->metadata, o.resume);
    resume_notes = adopt_saved_settings(o, saved, ck->position, run.size());
  }
  observe::MetricsLoggerOptions metrics_options;
  metrics_options.jsonl = o.metrics;
  metrics_options.csv = o.metrics_csv;
  metrics_options.tensorboard_dir = o.tensorboard;
  observe::MetricsLogger metrics(run.is_main() ? metrics_options : observe::MetricsLoggerOptions{});
  const TextCorpus corpus = open_corpus(o);
  const TextDataset train_set = first_records(corpus.train(), o.limit_records);
  const TextDataset valid_set = validation_records(o, corpus);

  examples::CharModelConfig config = o.model;
  config.vocab = corpus.vocab().size();
  const std::string digest = data_digest(train_set, valid_set);
  if (ck) {
    if (ck->vocab.symbols() != corpus.vocab().symbols() || ck->vocab.level() != corpus.vocab().level())
      throw Error("--resume: " + o.resume + " was trained with another vocabulary (" +
                  std::to_string(ck->vocab.size()) + " ids) than --data gives (" +
                  std::to_string(corpus.vocab().size()) + " ids); use the same --data, --valid-fraction and --seed");
    // The architecture comes from the checkpoint; a flag given anyway must agree with it.
    auto take = [&](const char* flag, bool given, int64_t& mine, int64_t saved) {
      if (given && mine != saved)
        throw UsageError(std::string("--") + flag + " " + std::to_string(mine) + " differs from the checkpoint's " +
                         std::to_string(saved));
      mine = saved;
    };
    take("embedding", o.embedding_given, config.embedding, ck->config.embedding);
    take("hidden", o.hidden_given, config.hidden, ck->config.hidden);
    take("layers", o.layers_given, config.layers, ck->config.layers);
    if (saved.data_digest != digest)
      throw Error("--resume: " + o.resume + " was trained on other records than --data " + o.data +
                  " gives with --valid-fraction " + examples::number_text(o.valid_fraction) + ", --seed " +
                  std::to_string(o.seed) + " and --limit-records " + std::to_string(o.limit_records) +
                  " (data digest " + saved.data_digest + " vs " + digest + "); resume on the same text");
  }

  examples::CharModel model(config);
  model.to(device);
  const auto ddp = run.wrap(model);  // rank 0's weights everywhere; a resume below loads the same on all
  // Two parameter groups: the L2 penalty applies to the weight matrices only, as is usual.
  std::vector<Tensor> decayed, plain;
  for (auto& [name, t] : model.named_parameters())
    (t.dim() >= 2 && name.rfind("embedding.", 0) != 0 ? decayed : plain).push_back(t);
  optim::Adam opt({optim::ParamGroup(decayed).weight_decay(o.weight_decay), optim::ParamGroup(plain).weight_decay(0)},
                  optim::AdamOptions(o.lr));

  BucketBatchSamplerOptions sampler_options;
  sampler_options.batch_size = o.batch_size * run.size();  // the global batch
  sampler_options.bucketing = o.bucketing;
  sampler_options.batches_per_bucket = o.batches_per_bucket;
  sampler_options.seed = o.seed;
  BucketBatchSampler sampler(train_set.lengths(), sampler_options);
  const int64_t per_epoch = sampler.size(), total_steps = per_epoch * o.epochs;

  optim::LambdaLR schedule(opt, lr_factor(o, total_steps));

  Position start;
  if (ck) {
    model.load_state_dict(ck->model);
    opt.load_state_dict(ck->optim);
    start = ck->position;
    // A completed epoch goes on with the next one, however many batches an epoch has now; a
    // partial one only where adopt_saved_settings kept the batching, so the position still fits.
    if (saved.epoch_complete)
      start = {start.epoch + 1, 0};
    else if (start.batches_done >= per_epoch || saved.batches_per_epoch != per_epoch)
      throw Error("--resume: " + o.resume + " had trained " + std::to_string(start.batches_done) +
                  " batches of epoch " + std::to_string(start.epoch) + ", but an epoch now has " +
                  std::to_string(per_epoch) + " (the checkpoint's had " + std::to_string(saved.batches_per_epoch) +
                  "); the position does not fit");
    for (const std::string& note : resume_notes) std::printf("%s\n", note.c_str());
    default_generator().set_state(metadata_uint64(ck->metadata, o.resume, "rng_seed"),
                                  metadata_uint64(ck->metadata, o.resume, "rng_offset"));
    std::printf("resumed from %s at epoch %" PRId64 ", batch %" PRId64 "\n", o.resume.c_str(), start.epoch,
                start.batches_done + 1);
  }
  schedule.set_epoch((start.epoch - 1) * per_epoch + start.batches_done);

  std::printf("char_lstm on %s, %d threads: %" PRId64 " train / %" PRId64 " validation records (%" PRId64 " / %" PRId64
              " characters to predict, record ends included), %" PRId64 " ids; embedding %" PRId64 ", %" PRId64
              "-layer LSTM %" PRId64 ", batch %" PRId64 "%s, bptt %" PRId64 ", bucketing %s, %" PRId64
              " batches/epoch\n",
              device.str().c_str(), get_num_threads(), train_set.size(), valid_set.size(),
              train_set.num_tokens() - train_set.size(), valid_set.num_tokens() - valid_set.size(), config.vocab,
              config.embedding, config.layers, config.hidden, sampler_options.batch_size, run.describe().c_str(),
              o.bptt, o.bucketing ? "on" : "off", per_epoch);
  std::fflush(stdout);

  if (start.epoch > o.epochs)
    std::printf("nothing to train: %s completed epoch %" PRId64 " and --epochs is %" PRId64 "\n", o.resume.c_str(),
                start.epoch - 1, o.epochs);
  const int64_t eval_batch = std::max<int64_t>(o.batch_size, 64);
  const double budget = o.max_minutes * 60;
  double trained_seconds = 0;  // all epochs of this run, validation excluded
  bool out_of_time = false;
  for (int64_t epoch = start.epoch; epoch <= o.epochs && !out_of_time; ++epoch) {
    const int64_t skip = epoch == start.epoch ? start.batches_done : 0;
    SkipBatches epoch_sampler(sampler, skip);
    DataLoader loader(train_set, epoch_sampler);
    loader.set_epoch(epoch);
    examples::Progress progress(epoch_sampler.size(), "chars/s");
    examples::TrainTotals totals;
    double seconds = 0;
    int64_t done = skip;
    examples::Stopwatch clock;
    for (const Example& batch : loader) {
      if (run.enabled())
        train_batch_shard(model, opt, batch, o.bptt, o.clip, device, totals, run, scaler);
      else
        examples::train_batch(model, opt, batch, o.bptt, o.clip, device, totals, scaler);
      schedule.step();
      ++done;
      progress.update(done - skip, totals.targets);
      if (o.eval_every > 0 && done % o.eval_every == 0 && done < per_epoch) {
        seconds += clock.seconds();
        progress.finish();
        const double valid = evaluate_all_ranks(model, valid_set, eval_batch, o.bptt, device, run);
        const examples::TrainTotals all = all_ranks(totals, run);
        const double pace = run.max(seconds);
        std::printf("epoch %2" PRId64 " batch %6" PRId64 "  train loss %.4f  valid loss %.4f  bpc %.3f  %.0f chars/s\n",
                    epoch, done, all.mean_loss(), valid, examples::bits(valid), double(all.targets) / pace);
        std::fflush(stdout);
        log_metrics(metrics, (epoch - 1) * per_epoch + done, epoch, all, valid, double(all.targets) / pace,
                    schedule.get_last_lr().front(), false);
        clock = examples::Stopwatch();
      }
      // The slowest rank's clock, so that all ranks stop after the same batch.
      if (budget > 0 && run.max(trained_seconds + seconds + clock.seconds()) >= budget && done < per_epoch) {
        out_of_time = true;
        break;
      }
    }
    seconds = run.max(seconds + clock.seconds());
    trained_seconds += seconds;
    progress.finish();
    const double valid = evaluate_all_ranks(model, valid_set, eval_batch, o.bptt, device, run);
    const examples::TrainTotals all = all_ranks(totals, run);
    std::printf("epoch %2" PRId64
                "%s  train loss %.4f  valid loss %.4f  bpc %.3f  %.0f chars/s  padding %.1f%%  "
                "lr %.2e  %.0f s\n",
                epoch, out_of_time ? " (partial)" : "", all.mean_loss(), valid, examples::bits(valid),
                double(all.targets) / std::max(seconds, 1e-9), 100 * all.padding.padding_share(),
                schedule.get_last_lr().front(), seconds);
    std::fflush(stdout);
    log_metrics(metrics, (epoch - 1) * per_epoch + done, epoch, all, valid,
                double(all.targets) / std::max(seconds, 1e-9), schedule.get_last_lr().front(), true);
    if (!o.checkpoint.empty() && run.is_main())
      save_checkpoint(o.checkpoint, model, opt, corpus.vocab(), {epoch, done},
                      {done == per_epoch, per_epoch, o.batch_size, run.size(), o.bptt, o.batches_per_bucket,
                       o.limit_records, o.bucketing, o.seed, o.valid_fraction, digest});
    if (budget > 0 && trained_seconds >= budget && epoch < o.epochs) out_of_time = true;
    if (out_of_time)
      std::printf("stopped after %.1f minutes of training (--max-minutes) at batch %" PRId64 " of %" PRId64
                  " in epoch %" PRId64 "%s\n",
                  trained_seconds / 60, done, per_epoch, epoch,
                  o.checkpoint.empty() ? "" : "; --resume continues from there");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options cli("char_lstm",
                       "Trains a character-level LSTM language model on text records; prints losses, validation "
                       "bits per character and characters/s. --sample generates text from a checkpoint.");
  add_options(cli);
  examples::add_profile_options(cli);
  return examples::run_example("char_lstm", [&] {
    std::optional<cxxopts::ParseResult> parsed = examples::parse_command_line(cli, argc, argv);
    if (!parsed) return 0;
    const Options options = read_options(*parsed);
    std::vector<examples::PathFlag> outputs = examples::logging_outputs(*parsed);
    outputs.push_back({"checkpoint", options.checkpoint});
    examples::check_output_paths({{"data", options.data}, {"resume", options.resume}}, outputs,
                                 {{"checkpoint", "resume"}});
    examples::ProfileSession profile(*parsed);
    const examples::DistributedRun run(*parsed, options.pipeline_stages > 0 ? "--pipeline-stages" : nullptr);
    const Device device = run.pick_device((*parsed)["device"].as<std::string>());
    // Training, validation and sampling all run under --amp; the gradients and the weights stay float32.
    examples::AmpSession amp(*parsed, device);
    if (run.enabled() && options.sample > 0) throw UsageError("--distributed only applies to training, not --sample");
    if (options.pipeline_stages > 0) {
      if (device != kCPU) throw UsageError("--pipeline-stages runs on the CPU only for now (--device cpu)");
      return train_pipelined(options, run);
    }
    return options.sample > 0 ? sample(options, device) : train(options, device, run, amp.scaler());
  });
}
