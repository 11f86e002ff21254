// Weight layouts a kernel may keep between calls inside one scope (Note [kept weight layouts]).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "tapegrad/core/tensor.h"

namespace tapegrad::backend {

// Note [kept weight layouts]: some kernels multiply by their weights in a layout of their own, a
// copy the size of the weights made per call (the CPU LSTM recurrence: [W_ih^T; W_hh^T], and its
// bf16 packing under autocast). A caller that runs the same weights several times within one
// forward and backward (activation checkpointing runs each segment twice) opens a WeightLayoutScope
// with a store, and the calls inside it, and the backward of ops recorded inside it, reuse the
// layouts they made. A layout is reused only while every weight it came from is still the same
// memory, view and version counter (optimisers, copies and in-place ops bump it). Outside any
// scope every call makes its own: a weight written through its data pointer, which bumps no
// version, is never read stale there. Inside a scope the rule is the one autograd already sets for
// saved tensors and checkpointing's recomputation: the weights do not change behind its back.
// Under InferenceMode an LSTM module keeps one store for its life (Note [inference layouts] in
// src/nn/lstm.cpp), so a batch-1 step does not copy its weights each call.
class WeightLayouts {
 public:
  // The layout of `weights` (undefined tensors allowed) that `make` builds, for the kernel's `kind`
  // and product type: the one kept from an earlier call when the weights are unchanged, else made
  // now (without the lock held) and kept.
  template <class T, class Make>
  std::shared_ptr<const T> get(int kind, DType products, const std::vector<Tensor>& weights, const Make& make) {
    // An inference tensor counts no versions, so a layout made from one could not tell it changed.
    for (const Tensor& w : weights)
      if (w.defined() && w.is_inference()) return make();
    if (std::shared_ptr<const void> kept = find(kind, products, weights))
      return std::static_pointer_cast<const T>(kept);
    std::vector<Source> sources(weights.begin(), weights.end());  // versions read before the data
    std::shared_ptr<const T> made = make();
    remember(kind, products, std::move(sources), made);
    return made;
  }
  // Frees every layout kept (later calls make theirs anew).
  void clear();

 private:
  // One weight as it was when a layout was made from it.
  struct Source {
    Source(const Tensor& t);  // NOLINT: made from each weight
    bool same_as(const Tensor& t) const;
    bool stale() const;  // its storage is gone or written since: no later call can match it
    std::weak_ptr<Storage> storage;
    bool defined = false;
    int64_t offset = 0;
    uint64_t version = 0;
    Shape sizes, strides;
    DType dtype = kFloat32;
  };
  struct Entry {
    int kind;
    DType products;
    std::vector<Source> sources;
    std::shared_ptr<const void> layout;
  };
  std::shared_ptr<const void> find(int kind, DType products, const std::vector<Tensor>& weights);
  void remember(int kind, DType products, std::vector<Source> sources, std::shared_ptr<const void> layout);

  std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first
};

// The store this thread's kernels keep layouts in now (null: none).
std::shared_ptr<WeightLayouts> current_weight_layouts();

// Makes `layouts` (null: none) the thread's store for the guard's lifetime.
class WeightLayoutScope {
 public:
  explicit WeightLayoutScope(std::shared_ptr<WeightLayouts> layouts);
  ~WeightLayoutScope();
  WeightLayoutScope(const WeightLayoutScope&) = delete;
  WeightLayoutScope& operator=(const WeightLayoutScope&) = delete;

 private:
  std::shared_ptr<WeightLayouts> saved_;
};

// The layout from the thread's store, or made afresh when no scope is open.
template <class T, class Make>
std::shared_ptr<const T> kept_layout(int kind, DType products, const std::vector<Tensor>& weights, const Make& make) {
  std::shared_ptr<WeightLayouts> store = current_weight_layouts();
  if (store == nullptr) return make();
  return store->get<T>(kind, products, weights, make);
}

// Layouts made and reused in every store since the process started (for tests and benchmarks).
struct WeightLayoutCounts {
  int64_t made = 0, reused = 0;
};
WeightLayoutCounts weight_layout_counts();

}  // namespace tapegrad::backend
