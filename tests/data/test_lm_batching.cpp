// Language-model batching: collate_lm values, padding counts, split_bptt chunks (and that an LSTM
// run chunk by chunk with carried state equals one run over the whole batch), BucketBatchSampler
// invariants, and the DataLoader driven by a batch sampler with and without prefetch.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "support/test_util.h"
#include "tapegrad/data/dataloader.h"
#include "tapegrad/data/lm_batch.h"
#include "tapegrad/data/sampler.h"
#include "tapegrad/data/text.h"

namespace tapegrad {
namespace {

using testing::expect_close;
using testing::expect_error;
using Ids = std::vector<int64_t>;
using Batches = std::vector<std::vector<int64_t>>;

// lengths 3, 1, 2 -> T = 3
const std::vector<Ids> kSequences = {{11, 12, 13, 14}, {15, 16}, {17, 18, 19}};

TEST(CollateLM, TimeMajorValues) {
  Example b = collate_lm(kSequences);
  ASSERT_EQ(b.input.sizes(), (Shape{3, 3}));
  EXPECT_EQ(b.input.dtype(), kInt64);
  EXPECT_EQ(b.input.tolist<int64_t>(), (Ids{11, 15, 17,  //
                                            12, 0, 18,   //
                                            13, 0, 0}));
  EXPECT_EQ(b.target.tolist<int64_t>(), (Ids{12, 16, 18,    //
                                             13, -100, 19,  //
                                             14, -100, -100}));
  EXPECT_EQ(b.lengths.sizes(), (Shape{3}));
  EXPECT_EQ(b.lengths.tolist<int64_t>(), (Ids{3, 1, 2}));
  PaddingStats s = padding_stats(b);
  EXPECT_EQ(s.real, 6);
  EXPECT_EQ(s.padded, 3);
  EXPECT_DOUBLE_EQ(s.padding_share(), 1.0 / 3.0);
}

TEST(CollateLM, BatchFirstAndOptions) {
  LMCollateOptions o;
  o.batch_first = true;
  o.pad_id = 9;
  o.ignore_index = -1;
  Example b = collate_lm(kSequences, o);
  ASSERT_EQ(b.input.sizes(), (Shape{3, 3}));
  EXPECT_EQ(b.input.tolist<int64_t>(), (Ids{11, 12, 13, 15, 9, 9, 17, 18, 9}));
  EXPECT_EQ(b.target.tolist<int64_t>(), (Ids{12, 13, 14, 16, -1, -1, 18, 19, -1}));
  Example wide = collate_lm({{1, 2, 3, 4, 5}, {6, 7}}, o);  // [B, T] = [2, 4]
  EXPECT_EQ(wide.input.sizes(), (Shape{2, 4}));
  EXPECT_EQ(padding_stats(wide).padded, 3);
}

TEST(CollateLM, TargetsWorkWithCrossEntropy) {
  // Padded targets are ignored: the mean runs over the 6 real steps only.
  Example b = collate_lm(kSequences);
  Tensor logits = zeros({9, 20});
  double loss = cross_entropy(logits, b.target.view({-1})).item();
  EXPECT_NEAR(loss, std::log(20.0), 1e-6);
  Tensor sum = cross_entropy(logits, b.target.view({-1}), {Reduction::Sum, -100, 0.0});
  EXPECT_NEAR(sum.item(), 6 * std::log(20.0), 1e-5);
}

TEST(CollateLM, BadInput) {
  expect_error([] { collate_lm(std::vector<Ids>{}); }, {"collate_lm", "empty batch"});
  expect_error([] { collate_lm({{1, 2}, {3}}); }, {"collate_lm", "sequence 1", "at least 2"});
  expect_error([] { padding_stats(Example{zeros({2, 2}), zeros({2, 2})}); }, {"padding_stats", "no lengths"});
}

TEST(SplitBptt, ChunkValuesAndLengths) {
  Example b = collate_lm(kSequences);
  std::vector<Example> chunks = split_bptt(b, 2);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].input.sizes(), (Shape{2, 3}));
  EXPECT_EQ(chunks[0].input.tolist<int64_t>(), (Ids{11, 15, 17, 12, 0, 18}));
  EXPECT_EQ(chunks[0].target.tolist<int64_t>(), (Ids{12, 16, 18, 13, -100, 19}));
  EXPECT_EQ(chunks[0].lengths.tolist<int64_t>(), (Ids{2, 1, 2}));
  EXPECT_EQ(chunks[1].input.sizes(), (Shape{1, 3}));
  EXPECT_EQ(chunks[1].input.tolist<int64_t>(), (Ids{13, 0, 0}));
  EXPECT_EQ(chunks[1].target.tolist<int64_t>(), (Ids{14, -100, -100}));
  EXPECT_EQ(chunks[1].lengths.tolist<int64_t>(), (Ids{1, 0, 0}));  // ended sequences: length 0
  // The chunks' padding adds up to the batch's.
  PaddingStats total = padding_stats(chunks[0]);
  total += padding_stats(chunks[1]);
  EXPECT_EQ(total.real, padding_stats(b).real);
  EXPECT_EQ(total.padded, padding_stats(b).padded);
  // bptt >= T: one chunk, the batch itself.
  std::vector<Example> one = split_bptt(b, 10);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].input.tolist<int64_t>(), b.input.tolist<int64_t>());
  EXPECT_EQ(one[0].lengths.tolist<int64_t>(), (Ids{3, 1, 2}));
}

TEST(SplitBptt, BatchFirst) {
  LMCollateOptions o;
  o.batch_first = true;
  std::vector<Example> chunks = split_bptt(collate_lm(kSequences, o), 2, /*batch_first=*/true);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].input.sizes(), (Shape{3, 2}));
  EXPECT_TRUE(chunks[0].input.is_contiguous());
  EXPECT_EQ(chunks[0].input.tolist<int64_t>(), (Ids{11, 12, 15, 0, 17, 18}));
  EXPECT_EQ(chunks[1].target.tolist<int64_t>(), (Ids{14, -100, -100}));
  EXPECT_EQ(chunks[1].lengths.tolist<int64_t>(), (Ids{1, 0, 0}));
}

TEST(SplitBptt, BadInput) {
  Example b = collate_lm(kSequences);
  expect_error([&] { split_bptt(b, 0); }, {"split_bptt", "bptt", "got 0"});
  Example no_lengths{b.input, b.target};
  expect_error([&] { split_bptt(no_lengths, 2); }, {"split_bptt", "lengths must be int64 [3]"});
  Example too_long = b;
  too_long.lengths = tensor<int64_t>({4, 1, 1});
  expect_error([&] { split_bptt(too_long, 2); }, {"split_bptt", "length 4", "[0, 3]"});
  Example mismatched{b.input, b.target.narrow(0, 0, 2), b.lengths};
  expect_error([&] { split_bptt(mismatched, 2); }, {"split_bptt", "[3, 3]", "[2, 3]"});
}

// Truncated BPTT changes only where gradients stop, not the forward values: running an LSTM chunk by
// chunk, carrying (h, c), must give the outputs and final states of one run over the whole batch,
// including for sequences whose length is 0 in the later chunks.
TEST(SplitBptt, LstmOverChunksMatchesTheWholeBatch) {
  std::vector<Ids> seqs = {{1, 2, 3, 4, 5, 6, 7, 8}, {2, 3}, {4, 5, 6, 7, 8}, {9, 1, 2, 3, 4, 5, 6}, {3, 3, 3}};
  Example batch = collate_lm(seqs);  // T = 7, lengths 7, 1, 4, 6, 2
  Generator g(5);
  Tensor emb = randn({10, 4}, kFloat64, &g);
  nn::LSTM lstm(4, 6, nn::LSTMOptions().num_layers(2), &g);
  lstm.to(kFloat64);
  nn::LSTMOutput whole = lstm.forward(embedding(emb, batch.input), Tensor(), Tensor(), batch.lengths);

  for (int64_t bptt : {1, 2, 3}) {
    Tensor h, c;
    std::vector<Tensor> outputs;
    for (const Example& chunk : split_bptt(batch, bptt)) {
      nn::LSTMOutput out = lstm.forward(embedding(emb, chunk.input), h, c, chunk.lengths);
      // A row of length 0 keeps its state: the carried state passes through unchanged.
      std::vector<int64_t> lens = chunk.lengths.tolist<int64_t>();
      for (size_t r = 0; r < lens.size(); ++r)
        if (lens[r] == 0 && h.defined()) expect_close(out.h_n.select(1, int64_t(r)), h.select(1, int64_t(r)), 0.0);
      h = out.h_n.detach();
      c = out.c_n.detach();
      outputs.push_back(out.output);
    }
    expect_close(cat(outputs, 0), whole.output, 1e-12);
    expect_close(h, whole.h_n, 1e-12);
    expect_close(c, whole.c_n, 1e-12);
  }
}

// Which bucket each index is in, and a check that a batch stays within one.
std::map<int64_t, size_t> bucket_of(const BucketBatchSampler& s) {
  std::map<int64_t, size_t> result;
  for (size_t k = 0; k < s.buckets().size(); ++k)
    for (int64_t i : s.buckets()[k]) result[i] = k;
  return result;
}

bool every_batch_in_one_bucket(const Batches& batches, const std::map<int64_t, size_t>& bucket) {
  for (const auto& b : batches)
    for (int64_t i : b)
      if (bucket.at(i) != bucket.at(b[0])) return false;
  return true;
}

std::vector<int64_t> random_lengths(int64_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> lengths;
  for (double u : rand({n}, kFloat64, &g).tolist<double>()) lengths.push_back(1 + int64_t(u * u * 300));
  return lengths;
}

std::vector<int64_t> sorted_flat(const Batches& batches) {
  std::vector<int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  return all;
}

// Padded steps of an epoch: each batch padded to its longest sequence.
int64_t padded_steps(const Batches& batches, const std::vector<int64_t>& lengths) {
  int64_t padded = 0;
  for (const auto& b : batches) {
    int64_t longest = 0;
    for (int64_t i : b) longest = std::max(longest, lengths[size_t(i)]);
    for (int64_t i : b) padded += longest - lengths[size_t(i)];
  }
  return padded;
}

TEST(BucketBatchSampler, Invariants) {
  const int64_t n = 1000;
  std::vector<int64_t> lengths = random_lengths(n, 3);
  BucketBatchSamplerOptions o;
  o.batch_size = 32;
  o.batches_per_bucket = 4;
  o.seed = 11;
  BucketBatchSampler s(lengths, o);
  ASSERT_EQ(s.buckets().size(), 8u);  // ceil(1000 / 128)
  auto bucket = bucket_of(s);
  std::vector<int64_t> all(n);
  for (int64_t i = 0; i < n; ++i) all[size_t(i)] = i;

  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    Batches batches = s.batches(epoch);
    EXPECT_EQ(int64_t(batches.size()), s.size());
    EXPECT_EQ(s.size(), 7 * 4 + 4);  // the last bucket holds 104 = 3 full batches and one of 8
    EXPECT_EQ(sorted_flat(batches), all) << "epoch " << epoch;  // each index exactly once
    EXPECT_TRUE(every_batch_in_one_bucket(batches, bucket)) << "epoch " << epoch;
    int64_t small = 0;
    for (const auto& b : batches) small += int64_t(b.size()) < o.batch_size;
    EXPECT_EQ(small, 1);
    // The buckets hold consecutive runs of the length order.
    for (size_t k = 1; k < s.buckets().size(); ++k) {
      int64_t prev_max = 0, next_min = 1 << 30;
      for (int64_t i : s.buckets()[k - 1]) prev_max = std::max(prev_max, lengths[size_t(i)]);
      for (int64_t i : s.buckets()[k]) next_min = std::min(next_min, lengths[size_t(i)]);
      EXPECT_LE(prev_max, next_min);
    }
  }
  // Reproducible: another sampler with the same seed, and set_epoch like DistributedSampler.
  BucketBatchSampler again(lengths, o);
  again.set_epoch(2);
  EXPECT_EQ(again.batches(), s.batches(2));
  // Epochs differ, in batch order and in batch contents.
  Batches e0 = s.batches(0), e1 = s.batches(1);
  EXPECT_NE(e0, e1);
  std::set<std::vector<int64_t>> contents0, contents1;
  for (auto b : e0) contents0.insert((std::sort(b.begin(), b.end()), b));
  for (auto b : e1) contents1.insert((std::sort(b.begin(), b.end()), b));
  EXPECT_NE(contents0, contents1);
  // Another seed, other batches.
  o.seed = 12;
  EXPECT_NE(BucketBatchSampler(lengths, o).batches(0), e0);
}

TEST(BucketBatchSampler, BucketingCutsPaddingAndTheCheckCatchesMixedBatches) {
  std::vector<int64_t> lengths = random_lengths(2000, 4);
  BucketBatchSamplerOptions o;
  o.batch_size = 32;
  BucketBatchSampler on(lengths, o);
  o.bucketing = false;
  BucketBatchSampler off(lengths, o);
  EXPECT_EQ(off.buckets().size(), 1u);
  EXPECT_EQ(off.size(), 63);  // ceil(2000 / 32)
  EXPECT_EQ(sorted_flat(off.batches(0)), sorted_flat(on.batches(0)));
  EXPECT_LT(padded_steps(on.batches(0), lengths) * 5, padded_steps(off.batches(0), lengths));
  // Negative control: plain random batches do mix the bucketed sampler's buckets.
  EXPECT_FALSE(every_batch_in_one_bucket(off.batches(0), bucket_of(on)));
}

TEST(BucketBatchSampler, DropLastBoundariesAndNoShuffle) {
  std::vector<int64_t> lengths = random_lengths(500, 5);
  BucketBatchSamplerOptions o;
  o.batch_size = 16;
  o.drop_last = true;
  o.boundaries = {10, 50, 100};
  BucketBatchSampler s(lengths, o);
  auto bucket = bucket_of(s);
  int64_t expected = 0;
  for (const auto& b : s.buckets()) expected += int64_t(b.size()) / 16;
  Batches batches = s.batches(0);
  EXPECT_EQ(int64_t(batches.size()), expected);
  EXPECT_EQ(s.size(), expected);
  std::set<int64_t> seen;
  for (const auto& b : batches) {
    EXPECT_EQ(b.size(), 16u);
    for (int64_t i : b) EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice";
  }
  EXPECT_TRUE(every_batch_in_one_bucket(batches, bucket));
  // Each bucket holds one boundary interval.
  auto interval = [&](int64_t len) {
    return std::upper_bound(o.boundaries.begin(), o.boundaries.end(), len) - o.boundaries.begin();
  };
  for (const auto& b : s.buckets())
    for (int64_t i : b) EXPECT_EQ(interval(lengths[size_t(i)]), interval(lengths[size_t(b[0])]));

  // Without shuffling: length order, the same every epoch.
  BucketBatchSamplerOptions plain;
  plain.batch_size = 16;
  plain.shuffle = false;
  BucketBatchSampler sorted(lengths, plain);
  Batches e0 = sorted.batches(0);
  EXPECT_EQ(e0, sorted.batches(5));
  int64_t last = 0;
  for (const auto& b : e0)
    for (int64_t i : b) {
      EXPECT_GE(lengths[size_t(i)], last);
      last = lengths[size_t(i)];
    }
}

TEST(BucketBatchSampler, BadOptions) {
  BucketBatchSamplerOptions o;
  o.batch_size = 0;
  expect_error([&] { BucketBatchSampler s({1, 2}, o); }, {"BucketBatchSampler", "batch_size", "got 0"});
  o = {};
  o.batches_per_bucket = 0;
  expect_error([&] { BucketBatchSampler s({1, 2}, o); }, {"BucketBatchSampler", "batches_per_bucket"});
  expect_error([&] { BucketBatchSampler s({1, -2}); }, {"BucketBatchSampler", "length -2", "sequence 1"});
  o = {};
  o.boundaries = {5, 5};
  expect_error([&] { BucketBatchSampler s({1, 2}, o); }, {"BucketBatchSampler", "strictly increasing", "position 1"});
  BucketBatchSampler empty(std::vector<int64_t>{});
  EXPECT_EQ(empty.size(), 0);
  EXPECT_TRUE(empty.batches(0).empty());
}

// A TextDataset of 300 records of varied lengths.
TextDataset synthetic_text() {
  std::vector<int64_t> lengths = random_lengths(300, 6);
  std::vector<Ids> records;
  for (size_t r = 0; r < lengths.size(); ++r) {
    Ids ids = {Vocab::kBosId};
    for (int64_t t = 0; t < lengths[r]; ++t) ids.push_back(4 + int64_t((r * 7 + size_t(t)) % 20));
    ids.push_back(Vocab::kEosId);
    records.push_back(ids);
  }
  return TextDataset(records);
}

TEST(DataLoaderWithBatchSampler, PrefetchOnAndOffGiveTheSameBatches) {
  TextDataset data = synthetic_text();
  BucketBatchSamplerOptions so;
  so.batch_size = 16;
  so.seed = 3;
  BucketBatchSampler sampler(data.lengths(), so);
  auto run = [&](bool prefetch) {
    DataLoaderOptions lo;
    lo.prefetch = prefetch;
    DataLoader loader(data, sampler, lo);
    EXPECT_EQ(loader.size(), sampler.size());
    std::vector<std::vector<Ids>> epochs;
    for (int epoch = 0; epoch < 2; ++epoch) {
      EXPECT_EQ(loader.batches(epoch), sampler.batches(epoch));
      std::vector<Ids> seen;
      for (const Example& b : loader) {
        seen.push_back(b.input.tolist<int64_t>());
        seen.push_back(b.target.tolist<int64_t>());
        seen.push_back(b.lengths.tolist<int64_t>());
      }
      EXPECT_EQ(int64_t(seen.size()), 3 * sampler.size());
      epochs.push_back(seen);
    }
    EXPECT_NE(epochs[0], epochs[1]);  // each begin() moves to the next epoch
    return epochs;
  };
  auto with = run(true), without = run(false);
  EXPECT_EQ(with, without);

  // The batches are the sampler's, collated: first batch of epoch 0 by hand.
  DataLoader loader(data, sampler);
  std::vector<int64_t> first = sampler.batches(0)[0];
  Example expected = data.get_batch(first);
  Example got = *loader.begin();
  EXPECT_EQ(got.input.tolist<int64_t>(), expected.input.tolist<int64_t>());
  EXPECT_EQ(got.lengths.tolist<int64_t>(), expected.lengths.tolist<int64_t>());
  Ids lens;
  for (int64_t i : first) lens.push_back(int64_t(data.record(i).size()) - 1);
  EXPECT_EQ(got.lengths.tolist<int64_t>(), lens);
  EXPECT_EQ(loader.order(0), [&] {
    std::vector<int64_t> flat;
    for (const auto& b : sampler.batches(0)) flat.insert(flat.end(), b.begin(), b.end());
    return flat;
  }());
}

TEST(DataLoaderWithBatchSampler, RejectsShuffleAndDropLast) {
  TextDataset data = synthetic_text();
  BucketBatchSampler sampler(data.lengths());
  DataLoaderOptions lo;
  lo.shuffle = true;
  expect_error([&] { DataLoader l(data, sampler, lo); }, {"DataLoader", "batch sampler", "shuffle = 1"});
  lo.shuffle = false;
  lo.drop_last = true;
  expect_error([&] { DataLoader l(data, sampler, lo); }, {"DataLoader", "drop_last = 1"});
}

TEST(TextDataset, SingleExample) {
  TextDataset data({{2, 5, 6, 3}, {2, 7, 3}});
  Example e = data.get(0);
  EXPECT_EQ(e.input.tolist<int64_t>(), (Ids{2, 5, 6}));
  EXPECT_EQ(e.target.tolist<int64_t>(), (Ids{5, 6, 3}));
  EXPECT_EQ(e.lengths.item<int64_t>(), 3);
  EXPECT_EQ(e.lengths.dim(), 0);
  EXPECT_EQ(data.lengths(), (Ids{3, 2}));
  EXPECT_EQ(data.num_tokens(), 7);
  expect_error([&] { data.get(2); }, {"TextDataset", "index 2", "size 2"});
  expect_error([&] { data.get_batch({}); }, {"TextDataset::get_batch", "empty"});
}

}  // namespace
}  // namespace tapegrad
