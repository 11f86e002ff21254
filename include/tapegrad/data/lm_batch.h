// Language-model batches: collating token sequences into padded inputs, shifted targets and
// lengths; counting padding; and cutting a batch into truncated-BPTT chunks.
#pragma once

#include <cstdint>
#include <vector>

#include "tapegrad/data/dataset.h"

namespace tapegrad {

struct LMCollateOptions {
  int64_t pad_id = 0;           // input id at padded steps (Vocab::kPadId)
  int64_t ignore_index = -100;  // target at padded steps: CrossEntropyOptions' default, so they add no loss
  // false (the default, like nn::LSTM): input and target are [T, B], time-major. true: [B, T].
  bool batch_first = false;
};

// Next-token prediction: a sequence s of n >= 2 ids gives input s[0 .. n-2], target s[1 .. n-1]
// and length n - 1. The batch is padded to T = the longest length:
//   input   int64 [T, B] (or [B, T]): s[t] for t < length, pad_id after
//   target  int64 [T, B] (or [B, T]): s[t + 1] for t < length, ignore_index after
//   lengths int64 [B] on the CPU: what nn::LSTM::forward and lstm_layer take as `lengths`
// With a Vocab's records wrapped in bos ... eos, every symbol and the end are predicted.
// Throws tapegrad::Error for an empty batch or a sequence shorter than 2 (naming its position).
Example collate_lm(const std::vector<std::vector<int64_t>>& sequences, const LMCollateOptions& options = {});
// The same over sequences owned elsewhere (no copy of them); none may be null.
Example collate_lm(const std::vector<const std::vector<int64_t>*>& sequences, const LMCollateOptions& options = {});

// Real versus padded timesteps, e.g. summed over an epoch to print the padding share.
struct PaddingStats {
  int64_t real = 0;    // steps inside a sequence: the sum of the lengths
  int64_t padded = 0;  // the rest of the T * B steps
  int64_t total() const { return real + padded; }
  double padding_share() const { return total() > 0 ? double(padded) / double(total()) : 0.0; }
  PaddingStats& operator+=(const PaddingStats& other) {
    real += other.real;
    padded += other.padded;
    return *this;
  }
};

// Of a batch from collate_lm (or split_bptt): input.numel() steps, of which sum(lengths) are real.
// Throws tapegrad::Error when lengths is undefined or input is not 2-D.
PaddingStats padding_stats(const Example& batch);

// Truncated backpropagation through time: cuts a collated batch along time into chunks of at most
// `bptt` steps. Chunk k covers steps [k * bptt, min((k + 1) * bptt, T)) of input and target (same
// layout as the batch: pass the batch_first it was collated with), and its lengths are
// clamp(lengths - k * bptt, 0, chunk steps). A sequence that has ended has length 0 in later
// chunks: nn::LSTM and lstm_layer accept zero lengths and then return that row's initial state as
// its final state (the state is carried through unchanged), and its targets there are all
// ignore_index, so it adds no loss. Every chunk holds at least one real step, because collate_lm
// pads only to the longest sequence. Carry the state across chunks, cut from the graph:
//
//   Tensor h, c;  // undefined: zeros for the first chunk
//   for (const Example& chunk : split_bptt(batch, 100)) {
//     nn::LSTMOutput out = lstm.forward(embedding(emb, chunk.input), h, c, chunk.lengths);
//     Tensor loss = cross_entropy(head(out.output).view({-1, V}), chunk.target.view({-1}));
//     ... backward, step ...
//     h = out.h_n.detach(); c = out.c_n.detach();
//   }
//
// The chunks' tensors are contiguous. Throws tapegrad::Error for bptt < 1, input and target of
// different or non-2-D shapes, or lengths that are not int64 [B] with values in [0, T].
std::vector<Example> split_bptt(const Example& batch, int64_t bptt, bool batch_first = false);

}  // namespace tapegrad
