// CPUOffloadOptimizer: host master copies of the CUDA parameters, the buckets, and the step that
// downloads the gradients, updates on the CPU and uploads the values, overlapping the three.
#include "tapegrad/distributed/offload.h"

#include <map>
#include <utility>

#include "distributed/wrapped_groups.h"
#include "optim/param_state.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/cuda/device.h"
#include "tapegrad/cuda/graph.h"
#include "tapegrad/cuda/memory.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad::distributed {

namespace {

constexpr const char* kName = "CPUOffloadOptimizer";
using detail::copy_options;
using detail::is_group_entry;
using detail::kGroupPrefix;
using detail::with_params;

bool is_16bit(DType dtype) {
  return dtype == kFloat16 || dtype == kBFloat16;
}

// Where step() hides the CPU parameters' gradients while the local optimiser updates a bucket of
// master copies (it updates every parameter that has a gradient); they come back however the step
// ends.
class HiddenGrads {
 public:
  explicit HiddenGrads(std::vector<Tensor> params) : params_(std::move(params)) {
    for (const Tensor& p : params_) {
      grads_.push_back(p.grad());
      p.set_grad(Tensor());
    }
  }
  ~HiddenGrads() {
    for (size_t i = 0; i < params_.size(); ++i) params_[i].set_grad(grads_[i]);
  }
  HiddenGrads(const HiddenGrads&) = delete;
  HiddenGrads& operator=(const HiddenGrads&) = delete;

 private:
  std::vector<Tensor> params_, grads_;
};

// An event recorded now on the current stream of each device in `devices`.
std::vector<cuda::Event> record_on(const std::vector<int>& devices) {
  std::vector<cuda::Event> events(devices.size());
  for (size_t k = 0; k < devices.size(); ++k) events[k].record(cuda::current_stream(devices[k]));
  return events;
}

void add_device(std::vector<int>& devices, const Device& device) {
  for (int d : devices)
    if (d == device.index()) return;
  devices.push_back(device.index());
}

}  // namespace

CPUOffloadOptimizer::CPUOffloadOptimizer(std::vector<Tensor> params, OptimizerFactory factory, int64_t bucket_bytes)
    : CPUOffloadOptimizer(std::vector<optim::ParamGroup>{optim::ParamGroup(std::move(params))}, std::move(factory),
                          bucket_bytes) {}

CPUOffloadOptimizer::CPUOffloadOptimizer(std::vector<optim::ParamGroup> groups, OptimizerFactory factory,
                                         int64_t bucket_bytes)
    : Optimizer(kName), factory_(std::move(factory)) {
  TG_CHECK(static_cast<bool>(factory_), kName, ": the optimizer factory is empty");
  TG_CHECK(bucket_bytes > 0, kName, ": bucket_bytes must be positive, got ", bucket_bytes);
  // Frozen parameters are skipped, as ZeroRedundancyOptimizer skips them: model.parameters() of a
  // partly frozen model is the usual argument.
  std::map<const TensorImpl*, std::pair<size_t, size_t>> seen;
  std::vector<optim::ParamGroup> kept;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<Tensor> trained;
    const std::vector<Tensor>& ps = groups[g].params();
    for (size_t i = 0; i < ps.size(); ++i) {
      TG_CHECK(ps[i].defined(), kName, ": parameter ", i, " of group ", g, " is undefined");
      const auto [it, fresh] = seen.emplace(ps[i].impl(), std::make_pair(g, i));
      TG_CHECK(fresh, kName, ": parameter ", i, " of group ", g, " is also parameter ", it->second.second, " of group ",
               it->second.first, " (a parameter may be listed only once)");
      if (!ps[i].requires_grad()) continue;
      // The local optimiser sees the master copy, a leaf, so it cannot refuse this one itself.
      TG_CHECK(ps[i].is_leaf(), kName, ": parameter ", i, " of group ", g,
               " is not a leaf (it is the result of an op); pass the tensors the model owns, e.g. model.parameters()");
      TG_CHECK(ps[i].device().is_cpu() || ps[i].device().is_cuda(), kName, ": parameter ", i, " of group ", g,
               " is on ", ps[i].device(), "; only CPU and CUDA parameters can be stepped");
      trained.push_back(ps[i]);
    }
    if (!trained.empty()) kept.push_back(with_params(std::move(trained), groups[g]));
  }
  TG_CHECK(!kept.empty(), kName, ": no parameter that requires grad (", seen.size(),
           " parameters given); an empty list is usually a model whose parameters() was empty");

  // The host side of every CUDA parameter: a pinned master copy (a leaf the local optimiser owns)
  // and a pinned buffer its gradient arrives in.
  autograd::NoGradGuard no_grad;
  std::vector<optim::ParamGroup> host_groups;
  for (const optim::ParamGroup& group : kept) {
    std::vector<Tensor> host;
    for (const Tensor& p : group.params()) {
      params_.push_back(p);
      if (p.device().is_cpu()) {
        cpu_params_.push_back(offloaded_.size());
        offloaded_.push_back(nullptr);
        host.push_back(p);
        continue;
      }
      auto o = std::make_unique<Offloaded>();
      o->device = p.device();
      o->sizes = p.sizes();
      const DType master_dtype = is_16bit(p.dtype()) ? kFloat32 : p.dtype();
      o->master = p.detach().to(kCPU, master_dtype).pin_memory();
      o->master.requires_grad_();
      o->grad = empty(p.sizes(), TensorOptions().dtype(p.dtype())).pin_memory();
      if (master_dtype != p.dtype()) {
        o->host_grad = empty(p.sizes(), TensorOptions().dtype(master_dtype));
        o->upload = empty(p.sizes(), TensorOptions().dtype(p.dtype())).pin_memory();
      }
      host.push_back(o->master);
      offloaded_.push_back(std::move(o));
    }
    host_groups.push_back(with_params(std::move(host), group));
  }
  for (const auto& o : offloaded_) host_params_.push_back(o ? o->master : params_[host_params_.size()]);

  try {
    local_ = factory_(host_groups);
  } catch (const Error& e) {
    TG_CHECK(false, kName, ": the local optimizer refused the parameter groups: ", e.what());
  }
  TG_CHECK(local_ != nullptr, kName, ": the optimizer factory returned null");
  bool same = local_->params().size() == host_params_.size() && local_->param_groups().size() == host_groups.size();
  for (size_t i = 0; same && i < host_params_.size(); ++i) same = local_->params()[i].impl() == host_params_[i].impl();
  TG_CHECK(same, kName,
           ": the optimizer factory must build its optimizer over the groups it is given (it returned one with ",
           local_->param_groups().size(), " groups of ", local_->params().size(), " parameters, given ",
           host_groups.size(), " groups of ", host_params_.size(), ")");
  // The full groups: the caller's parameters with the local optimiser's options (its defaults filled
  // in), listed in its state dict's order so that state_dict() reads as a plain optimiser's.
  for (size_t g = 0; g < kept.size(); ++g) groups_.push_back(with_params(kept[g].params(), local_->param_groups()[g]));
  const std::string first = std::string(kGroupPrefix) + "0.";
  for (const auto& entry : local_->state_dict()) {
    if (entry.first.rfind(first, 0) != 0) continue;
    const std::string option = entry.first.substr(first.size());
    if (option != "params" && option != "initial_lr") options_.push_back(option);
  }

  int64_t filled = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!offloaded_[i]) continue;
    if (buckets_.empty() || filled >= bucket_bytes) {
      buckets_.emplace_back();
      filled = 0;
    }
    buckets_.back().push_back(i);
    filled += params_[i].numel() * static_cast<int64_t>(params_[i].itemsize());
  }
  uploaded_.resize(buckets_.size());
}

void CPUOffloadOptimizer::check_params_unmoved() const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Device expected = offloaded_[i] ? offloaded_[i]->device : Device(kCPU);
    TG_CHECK(p.device() == expected, kName, ".step: parameter ", i, " was on ", expected,
             " when the optimizer was built", " and is on ", p.device(),
             " now; build the optimizer after moving the model");
    TG_CHECK(!offloaded_[i] || p.sizes() == offloaded_[i]->sizes, kName, ".step: parameter ", i, " had shape ",
             shape_str(offloaded_[i] ? offloaded_[i]->sizes : Shape{}), " when the optimizer was built and has ",
             shape_str(p.sizes()), " now");
  }
}

void CPUOffloadOptimizer::sync_local_groups() {
  for (size_t g = 0; g < groups_.size(); ++g) copy_options(groups_[g], local_->param_groups()[g]);
}

void CPUOffloadOptimizer::step() {
  check_groups();
  check_params_unmoved();
  TG_CHECK(!cuda::is_available() || !cuda::is_current_stream_capturing(), kName,
           ".step: cannot be captured in a CUDA graph (it waits on the host for the gradients); step outside the "
           "captured region");
  sync_local_groups();
  autograd::NoGradGuard no_grad;

  // 1. Every gradient on its way to the host, an event after each bucket.
  std::vector<std::vector<size_t>> stepped(buckets_.size());  // per bucket: the parameters with a gradient
  std::vector<std::vector<cuda::Event>> arrived(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    std::vector<int> devices;
    for (size_t i : buckets_[b]) {
      const Tensor g = params_[i].grad();
      if (!g.defined()) continue;
      // A non-contiguous gradient's contiguous copy is freed at once, but on the stream the copy
      // runs on, so the allocator hands its block out only to work queued after the copy.
      cuda::copy_to_host_async(offloaded_[i]->grad, g.contiguous());
      stepped[b].push_back(i);
      add_device(devices, params_[i].device());
    }
    arrived[b] = record_on(devices);
  }

  // 2. The CPU parameters, as they are, while the gradients travel (the masters have no gradient).
  if (!cpu_params_.empty()) local_->step();
  HiddenGrads hidden([&] {
    std::vector<Tensor> cpu;
    for (size_t i : cpu_params_) cpu.push_back(params_[i]);
    return cpu;
  }());

  // 3. Bucket by bucket: wait for its gradients, update on the CPU, send the values back.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (stepped[b].empty()) continue;
    for (const cuda::Event& e : arrived[b]) e.synchronize();
    // The previous step's uploads of this bucket read the masters (or the staging buffers) when
    // they run: both are rewritten below.
    for (const cuda::Event& e : uploaded_[b]) e.synchronize();
    for (size_t i : stepped[b]) {
      Offloaded& o = *offloaded_[i];
      if (o.host_grad.defined()) {
        o.host_grad.copy_(o.grad);
        o.master.set_grad(o.host_grad);
      } else {
        o.master.set_grad(o.grad);
      }
    }
    struct ClearMasterGrads {
      const std::vector<std::unique_ptr<Offloaded>>& offloaded;
      const std::vector<size_t>& indices;
      ~ClearMasterGrads() {
        for (size_t i : indices) offloaded[i]->master.set_grad(Tensor());
      }
    } clear{offloaded_, stepped[b]};
    local_->step();
    std::vector<int> devices;
    for (size_t i : stepped[b]) {
      Offloaded& o = *offloaded_[i];
      Tensor target = params_[i];
      if (o.upload.defined()) {
        o.upload.copy_(o.master);
        target.copy_(o.upload);
      } else {
        target.copy_(o.master);
      }
      add_device(devices, o.device);
    }
    uploaded_[b] = record_on(devices);
  }
}

void CPUOffloadOptimizer::copy_params_to_host() {
  check_params_unmoved();
  autograd::NoGradGuard no_grad;
  for (const std::vector<cuda::Event>& events : uploaded_)
    for (const cuda::Event& e : events) e.synchronize();
  for (size_t i = 0; i < params_.size(); ++i)
    if (offloaded_[i]) offloaded_[i]->master.copy_(params_[i]);
}

bool CPUOffloadOptimizer::is_offloaded(size_t index) const {
  TG_CHECK(index < params_.size(), kName, ".is_offloaded: parameter index ", index, " out of range for ",
           params_.size(), " parameters");
  return offloaded_[index] != nullptr;
}

const Tensor& CPUOffloadOptimizer::host_param(size_t index) const {
  TG_CHECK(index < params_.size(), kName, ".host_param: parameter index ", index, " out of range for ", params_.size(),
           " parameters");
  return host_params_[index];
}

int64_t CPUOffloadOptimizer::offloaded_state_bytes() const {
  int64_t bytes = 0;
  for (const auto& [key, t] : local_->state_dict()) {
    if (is_group_entry(key)) continue;
    // A plain optimiser keeps its step counts on the host (as integers): only the per-element
    // buffers would be on the device.
    const auto [index, field] = optim::parse_state_key(key, params_.size(), kName);
    if (offloaded_[index] && field != "step") bytes += t.numel() * static_cast<int64_t>(t.itemsize());
  }
  return bytes;
}

void CPUOffloadOptimizer::fill_defaults(optim::ParamGroup&) const {
  TG_CHECK(false, kName, ".add_param_group: not supported yet; pass every group to the constructor");
}

// Whether the factory's optimiser accepts the options, asked of a one-element stand-in.
void CPUOffloadOptimizer::check_group(const optim::ParamGroup& group, const std::string& where) const {
  Tensor stand_in = zeros({1});
  stand_in.requires_grad_();
  try {
    factory_({with_params({stand_in}, group)});
  } catch (const Error& e) {
    TG_CHECK(false, where, ": ", e.what());
  }
}

// The local optimiser's entries: it holds the parameters in params()'s order, so its indices are
// the plain optimiser's.
StateDict CPUOffloadOptimizer::param_state_dict() const {
  StateDict state;
  for (auto& entry : local_->state_dict())
    if (!is_group_entry(entry.first)) state.push_back(std::move(entry));
  return state;
}

// The local optimiser converts each entry to its parameter's device and dtype (the host copy's),
// so a state saved by a plain optimiser on the GPU lands in host memory.
void CPUOffloadOptimizer::load_param_state(const StateDict& entries, const std::vector<optim::ParamGroup>& groups) {
  StateDict local = entries;
  int64_t offset = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string prefix = kGroupPrefix + std::to_string(g) + ".";
    const int64_t n = static_cast<int64_t>(groups[g].params().size());
    std::vector<double> indices(static_cast<size_t>(n));
    for (double& i : indices) i = static_cast<double>(offset++);
    local.emplace_back(prefix + "params", tensor<double>(indices, {n}, TensorOptions().dtype(kFloat64)));
    for (const std::string& option : optim::ParamGroup::option_names())
      if (groups[g].has(option)) local.emplace_back(prefix + option, full({}, groups[g].get(option), kFloat64));
  }
  local_->load_state_dict(local);
}

}  // namespace tapegrad::distributed
