// Note [kept weight layouts] (weight_layouts.h).
#include "backend/weight_layouts.h"

#include <algorithm>
#include <atomic>

namespace tapegrad::backend {

namespace {

thread_local std::shared_ptr<WeightLayouts> t_current;
std::atomic<int64_t> g_made{0}, g_reused{0};

// One store holds a few layer-directions' layouts: a 4-layer bidirectional stack has 8 weight
// sets, each with a forward layout and, under autocast, a backward one.
constexpr size_t kMaxLayouts = 16;

}  // namespace

WeightLayouts::Source::Source(const Tensor& t) : defined(t.defined()) {
  if (!defined) return;
  storage = t.storage();
  offset = t.storage_offset();
  version = t.storage()->version();
  sizes = t.sizes();
  strides = t.strides();
  dtype = t.dtype();
}

bool WeightLayouts::Source::same_as(const Tensor& t) const {
  if (!t.defined() || !defined) return t.defined() == defined;
  return storage.lock() == t.storage() && offset == t.storage_offset() && version == t.storage()->version() &&
         sizes == t.sizes() && strides == t.strides() && dtype == t.dtype();
}

bool WeightLayouts::Source::stale() const {
  if (!defined) return false;
  std::shared_ptr<Storage> s = storage.lock();
  return !s || s->version() != version;
}

std::shared_ptr<const void> WeightLayouts::find(int kind, DType products, const std::vector<Tensor>& weights) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Versions only grow: a layout of changed or freed weights is dead, and its memory goes now.
  entries_.remove_if([](const Entry& e) {
    return std::any_of(e.sources.begin(), e.sources.end(), [](const Source& s) { return s.stale(); });
  });
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->kind != kind || it->products != products || it->sources.size() != weights.size()) continue;
    bool same = true;
    for (size_t i = 0; i < weights.size() && same; ++i) same = it->sources[i].same_as(weights[i]);
    if (!same) continue;
    entries_.splice(entries_.begin(), entries_, it);
    g_reused.fetch_add(1, std::memory_order_relaxed);
    return entries_.front().layout;
  }
  return nullptr;
}

void WeightLayouts::remember(int kind, DType products, std::vector<Source> sources,
                             std::shared_ptr<const void> layout) {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.push_front(Entry{kind, products, std::move(sources), std::move(layout)});
  if (entries_.size() > kMaxLayouts) entries_.pop_back();
  g_made.fetch_add(1, std::memory_order_relaxed);
}

void WeightLayouts::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
}

std::shared_ptr<WeightLayouts> current_weight_layouts() {
  return t_current;
}

WeightLayoutScope::WeightLayoutScope(std::shared_ptr<WeightLayouts> layouts) : saved_(std::move(t_current)) {
  t_current = std::move(layouts);
}

WeightLayoutScope::~WeightLayoutScope() {
  t_current = std::move(saved_);
}

WeightLayoutCounts weight_layout_counts() {
  return {g_made.load(std::memory_order_relaxed), g_reused.load(std::memory_order_relaxed)};
}

}  // namespace tapegrad::backend
