// DistributedDataParallel: the cross-rank parameter check and broadcast at construction, and the
// reducer that buckets gradients and all-reduces each bucket as soon as backward has filled it.
#include "tapegrad/distributed/ddp.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_set>

#include "distributed/collective_check.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/autograd/hooks.h"
#include "tapegrad/autograd/node.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad::distributed {

using ::tapegrad::detail::str_cat;
using Clock = std::chrono::steady_clock;

namespace {

// One rank's parameters and buffers as integers: count, then per tensor dtype, requires_grad,
// ndim and sizes.
std::vector<int64_t> describe_module(const std::vector<Tensor>& params, const StateDict& buffers) {
  std::vector<int64_t> out{int64_t(params.size()), int64_t(buffers.size())};
  auto add = [&](const Tensor& t) {
    out.push_back(int64_t(t.dtype()));
    out.push_back(t.requires_grad() ? 1 : 0);
    out.push_back(t.dim());
    for (int64_t s : t.sizes()) out.push_back(s);
  };
  for (const Tensor& p : params) add(p);
  for (const auto& [name, b] : buffers) add(b);
  return out;
}

struct TensorMeta {
  DType dtype;
  bool requires_grad;
  Shape sizes;
};

std::vector<TensorMeta> parse_module(const std::vector<int64_t>& words, int64_t& params) {
  params = words[0];
  std::vector<TensorMeta> metas;
  size_t at = 2;
  for (int64_t i = 0; i < words[0] + words[1]; ++i) {
    TensorMeta m{DType(words[at]), words[at + 1] != 0, {}};
    int64_t ndim = words[at + 2];
    m.sizes.assign(words.begin() + int64_t(at) + 3, words.begin() + int64_t(at) + 3 + ndim);
    at += 3 + size_t(ndim);
    metas.push_back(m);
  }
  return metas;
}

std::string meta_str(const TensorMeta& m) {
  return str_cat(dtype_name(m.dtype), " ", shape_str(m.sizes), m.requires_grad ? "" : " (requires_grad false)");
}

}  // namespace

struct DistributedDataParallel::Reducer {
  struct Bucket {
    std::vector<size_t> members;  // parameter indices
    std::vector<int64_t> offsets;
    int64_t numel = 0;
    DType dtype = kFloat32;
    Device device = kCPU;
    Tensor buffer;
    size_t pending = 0;
    bool ready = false;
    Work work;
    BucketTiming timing;
  };

  std::shared_ptr<ProcessGroup> group;
  bool find_unused = false;
  std::vector<Tensor> params;  // those that require grad, in registration order
  std::vector<std::string> names;
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;
  std::vector<char> marked;
  size_t next_launch = 0;
  // Iterations started (prepare_for_backward outside no_sync), the same on every rank while they
  // are in step; carried by every collective of the reduction and compared across ranks.
  int64_t iteration = -1;
  bool active = false;  // an iteration started and its reduction has not finished
  bool no_sync = false;
  std::string failed;  // set once a reduction failed: the replicas may differ now
  std::vector<BucketTiming> timings;
  std::mutex mutex;

  void check_usable() const {
    TG_CHECK(failed.empty(), "DistributedDataParallel: an earlier gradient reduction failed, so the replicas may ",
             "differ; this DDP can no longer be used (", failed, ")");
  }

  std::string unfinished_message() const {
    std::string missing;
    for (size_t i = 0; i < params.size(); ++i)
      if (!marked[i]) missing += (missing.empty() ? "" : ", ") + names[i];
    return str_cat("DistributedDataParallel: the previous iteration's backward produced no gradient for ", missing,
                   ", so its gradients were never reduced (and differ between ranks). If the model does not use every ",
                   "parameter in every iteration, construct DDP with DDPOptions().find_unused_parameters(true) and ",
                   "pass the outputs to prepare_for_backward() (forward() does that)");
  }

  void start_iteration() {
    // A forward without a backward (nothing marked) is not an error; a partial backward is.
    if (active && std::find(marked.begin(), marked.end(), 1) != marked.end()) throw Error(unfinished_message());
    std::fill(marked.begin(), marked.end(), 0);
    for (Bucket& b : buckets) {
      b.pending = b.members.size();
      b.ready = false;
      b.work = Work();
      b.timing = BucketTiming{};
    }
    next_launch = 0;
    active = true;
    ++iteration;
  }

  void on_grad_ready(size_t index) {
    std::lock_guard<std::mutex> lock(mutex);
    if (no_sync) return;
    check_usable();
    if (!active) start_iteration();
    if (marked[index]) throw Error(unfinished_message());  // a second backward before this one finished
    mark_ready(index);
  }

  void mark_ready(size_t index) {
    marked[index] = 1;
    Bucket& bucket = buckets[bucket_of[index]];
    if (--bucket.pending == 0) bucket.ready = true;
    // Buckets start in index order on every rank, whatever order their gradients came in, so the
    // ranks' all-reduces pair up.
    while (next_launch < buckets.size() && buckets[next_launch].ready) launch(next_launch++);
    if (next_launch == buckets.size()) finish();
  }

  void launch(size_t b) {
    Bucket& bucket = buckets[b];
    autograd::NoGradGuard no_grad;
    for (size_t k = 0; k < bucket.members.size(); ++k) {
      const Tensor& p = params[bucket.members[k]];
      TG_CHECK(p.dtype() == bucket.dtype && p.device() == bucket.device, "DistributedDataParallel: parameter ",
               names[bucket.members[k]], " is now ", dtype_name(p.dtype()), " on ", p.device(), ", but was ",
               dtype_name(bucket.dtype), " on ", bucket.device, " when DDP was constructed; move the module first");
      Tensor slice = bucket.buffer.narrow(0, bucket.offsets[k], p.numel());
      Tensor g = p.grad();
      if (g.defined()) {
        slice.copy_(g.reshape({-1}));
      } else {
        slice.zero_();  // unused here (find_unused_parameters): contributes zero to the average
      }
    }
    bucket.timing.ready = Clock::now();
    detail::IterationScope scope(iteration);
    bucket.work = group->all_reduce_async(bucket.buffer, ReduceOp::Avg);
  }

  void finish() {
    active = false;
    std::vector<char> used(params.size(), 1);
    try {
      if (find_unused) {
        // Which parameters have a gradient on some rank; the others keep an undefined gradient.
        Tensor flags = zeros({int64_t(params.size())}, kInt32);
        int32_t* f = flags.data<int32_t>();
        for (size_t i = 0; i < params.size(); ++i) f[i] = params[i].grad().defined() ? 1 : 0;
        detail::IterationScope scope(iteration);
        group->all_reduce(flags, ReduceOp::Max);
        for (size_t i = 0; i < params.size(); ++i) used[i] = f[i] != 0;
      }
      for (size_t b = 0; b < buckets.size(); ++b) {
        try {
          buckets[b].work.wait();
        } catch (const Error& e) {
          std::string members;
          for (size_t m : buckets[b].members) members += (members.empty() ? "" : ", ") + names[m];
          throw Error(str_cat("DistributedDataParallel: the gradient all-reduce of bucket ", b, " (", members,
                              ") failed: ", e.what()));
        }
      }
    } catch (const Error& e) {
      failed = e.what();
      throw;
    }
    autograd::NoGradGuard no_grad;
    timings.clear();
    for (Bucket& bucket : buckets) {
      for (size_t k = 0; k < bucket.members.size(); ++k) {
        size_t i = bucket.members[k];
        if (!used[i]) continue;
        const Tensor& p = params[i];
        Tensor average = bucket.buffer.narrow(0, bucket.offsets[k], p.numel()).view(p.sizes());
        Tensor g = p.grad();
        if (g.defined()) {
          g.copy_(average);
        } else {
          p.set_grad(average.clone());
        }
      }
      bucket.timing.started = bucket.work.start_time();
      bucket.timing.finished = bucket.work.end_time();
      timings.push_back(bucket.timing);
    }
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group, DDPOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  TG_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  TG_CHECK(group_ != nullptr, "DistributedDataParallel: the process group is null");
  TG_CHECK(options_.bucket_cap_mb_ > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got ",
           options_.bucket_cap_mb_);
  std::vector<Tensor> all_params = module_->parameters();  // each tensor once: tied weights are one
  StateDict buffers = module_->named_buffers();
  StateDict named = module_->named_parameters();

  // The same parameters everywhere, checked on every rank alike (so every rank throws, not one).
  std::vector<int64_t> mine = describe_module(all_params, buffers);
  std::vector<Tensor> gathered = group_->all_gather(tensor(mine, {int64_t(mine.size())}, kInt64));
  int64_t count0 = 0;
  std::vector<TensorMeta> first = parse_module(gathered[0].tolist<int64_t>(), count0);
  auto name_of = [&](size_t i) {
    if (i < all_params.size()) {
      for (const auto& [name, p] : named)
        if (p.is_same(all_params[i])) return str_cat("parameter ", name);
      return str_cat("parameter number ", i);
    }
    return str_cat("buffer ", buffers[i - all_params.size()].first);
  };
  for (size_t r = 1; r < gathered.size(); ++r) {
    int64_t count = 0;
    std::vector<TensorMeta> other = parse_module(gathered[r].tolist<int64_t>(), count);
    TG_CHECK(count == count0 && other.size() == first.size(), "DistributedDataParallel: rank 0 has ", count0,
             " parameters and ", first.size() - size_t(count0), " buffers, rank ", r, " has ", count, " and ",
             other.size() - size_t(count), ": every rank must build the same model");
    for (size_t i = 0; i < first.size(); ++i) {
      const TensorMeta &a = first[i], &b = other[i];
      TG_CHECK(a.dtype == b.dtype && a.requires_grad == b.requires_grad && a.sizes == b.sizes,
               "DistributedDataParallel: ", name_of(i), " is ", meta_str(a), " on rank 0 but ", meta_str(b),
               " on rank ", r, ": every rank must build the same model");
    }
  }

  // Rank 0's values everywhere.
  {
    autograd::NoGradGuard no_grad;
    std::vector<std::pair<Tensor, Tensor>> copies;  // (target, what was broadcast) for non-contiguous ones
    std::vector<Work> works;
    auto send = [&](const Tensor& t) {
      Tensor c = t.is_contiguous() ? t : t.contiguous();
      if (!c.is_same(t)) copies.emplace_back(t, c);
      works.push_back(group_->broadcast_async(c, 0));
    };
    for (const Tensor& p : all_params) send(p);
    for (const auto& [name, b] : buffers) send(b);
    for (const Work& w : works) w.wait();
    for (auto& [target, c] : copies) target.copy_(c);
  }

  // Buckets: parameters in reverse registration order, one open bucket per (dtype, device).
  auto reducer = std::make_shared<Reducer>();
  reducer->group = group_;
  reducer->find_unused = options_.find_unused_parameters_;
  for (const Tensor& p : all_params) {
    if (!p.requires_grad()) continue;
    reducer->params.push_back(p);
  }
  for (const Tensor& p : reducer->params) {
    std::string name = "?";
    for (const auto& [n, q] : named)
      if (q.is_same(p)) {
        name = n;
        break;
      }
    reducer->names.push_back(name);
  }
  const double cap = options_.bucket_cap_mb_ * 1024.0 * 1024.0;
  std::vector<std::pair<std::string, Reducer::Bucket>> open;  // key: dtype and device
  auto close = [&](Reducer::Bucket& bucket) {
    bucket.buffer = zeros({bucket.numel}, TensorOptions(bucket.dtype).device(bucket.device));
    for (size_t m : bucket.members) reducer->bucket_of[m] = reducer->buckets.size();
    reducer->buckets.push_back(std::move(bucket));
    bucket = Reducer::Bucket{};
  };
  reducer->bucket_of.assign(reducer->params.size(), 0);
  for (size_t k = reducer->params.size(); k-- > 0;) {
    const Tensor& p = reducer->params[k];
    std::string key = str_cat(dtype_name(p.dtype()), "@", p.device());
    auto slot = std::find_if(open.begin(), open.end(), [&](const auto& e) { return e.first == key; });
    if (slot == open.end()) {
      open.emplace_back(key, Reducer::Bucket{});
      slot = open.end() - 1;
    }
    Reducer::Bucket& bucket = slot->second;
    bucket.dtype = p.dtype();
    bucket.device = p.device();
    bucket.members.push_back(k);
    bucket.offsets.push_back(bucket.numel);
    bucket.numel += p.numel();
    if (double(bucket.numel) * double(dtype_size(bucket.dtype)) >= cap) close(bucket);
  }
  for (auto& [key, bucket] : open)
    if (!bucket.members.empty()) close(bucket);
  reducer->marked.assign(reducer->params.size(), 0);
  reducer_ = reducer;

  std::weak_ptr<Reducer> weak = reducer_;
  for (size_t i = 0; i < reducer_->params.size(); ++i) {
    handles_.push_back(autograd::register_post_accumulate_grad_hook(reducer_->params[i], [weak, i](const Tensor&) {
      if (auto r = weak.lock()) r->on_grad_ready(i);
    }));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (autograd::RemovableHandle& handle : handles_) handle.remove();
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  auto unary = std::dynamic_pointer_cast<nn::UnaryModule>(module_);
  TG_CHECK(unary != nullptr, "DistributedDataParallel::forward: the module (", module_->name(),
           ") is not a UnaryModule; call it yourself, then prepare_for_backward(outputs)");
  if (options_.broadcast_buffers_) {
    autograd::NoGradGuard no_grad;
    for (const auto& [name, b] : module_->named_buffers()) group_->broadcast(b.is_contiguous() ? b : b.contiguous(), 0);
  }
  Tensor output = unary->forward(input);
  if (autograd::grad_enabled() && output.requires_grad()) prepare_for_backward({output});
  return output;
}

void DistributedDataParallel::prepare_for_backward(const std::vector<Tensor>& outputs) {
  Reducer& r = *reducer_;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.no_sync) return;
  r.check_usable();
  r.start_iteration();
  if (!r.find_unused) return;
  // Every node the outputs' graph reaches; a parameter whose accumulator is not among them gets
  // no gradient from this backward.
  std::unordered_set<const autograd::Node*> seen;
  std::unordered_set<const TensorImpl*> direct;  // outputs that are parameters themselves
  std::vector<const autograd::Node*> stack;
  for (const Tensor& out : outputs) {
    if (!out.defined() || !out.requires_grad()) continue;
    if (out.grad_fn()) {
      if (seen.insert(out.grad_fn().get()).second) stack.push_back(out.grad_fn().get());
    } else {
      direct.insert(out.impl());
    }
  }
  while (!stack.empty()) {
    const autograd::Node* node = stack.back();
    stack.pop_back();
    for (const autograd::Edge& edge : node->next_edges())
      if (edge.valid() && seen.insert(edge.node.get()).second) stack.push_back(edge.node.get());
  }
  for (size_t i = 0; i < r.params.size(); ++i) {
    TensorImpl* impl = r.params[i].impl();
    std::shared_ptr<autograd::Node> accumulator;
    {
      std::lock_guard<std::mutex> impl_lock(impl->autograd_mutex);  // Note [shared leaves]
      accumulator = impl->grad_accumulator.lock();
    }
    bool used = direct.count(impl) || (accumulator && seen.count(accumulator.get()));
    if (!used) r.mark_ready(i);
  }
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp) {
  std::lock_guard<std::mutex> lock(ddp_.reducer_->mutex);
  previous_ = ddp_.reducer_->no_sync;
  ddp_.reducer_->no_sync = true;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() {
  std::lock_guard<std::mutex> lock(ddp_.reducer_->mutex);
  ddp_.reducer_->no_sync = previous_;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const Reducer::Bucket& b : reducer_->buckets) {
    out.emplace_back();
    for (size_t m : b.members) out.back().push_back(reducer_->names[m]);
  }
  return out;
}

std::vector<DistributedDataParallel::BucketTiming> DistributedDataParallel::last_bucket_timings() const {
  std::lock_guard<std::mutex> lock(reducer_->mutex);
  return reducer_->timings;
}

}  // namespace tapegrad::distributed
