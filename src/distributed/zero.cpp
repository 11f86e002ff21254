// ZeroRedundancyOptimizer: the partition, the step (local update, then a broadcast from each
// parameter's owner) and the gathering of the sharded state into one state dict.
#include "tapegrad/distributed/zero.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <utility>

#include "distributed/wrapped_groups.h"
#include "optim/param_state.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad::distributed {

namespace {

constexpr const char* kName = "ZeroRedundancyOptimizer";
using detail::copy_options;
using detail::is_group_entry;
using detail::kGroupPrefix;
using detail::with_params;

// The factory's optimiser; its errors (an invalid option, a parameter it refuses) name this class.
std::unique_ptr<optim::Optimizer> build(const OptimizerFactory& factory, std::vector<optim::ParamGroup> groups,
                                        const std::string& what) {
  std::unique_ptr<optim::Optimizer> built;
  try {
    built = factory(std::move(groups));
  } catch (const Error& e) {
    TG_CHECK(false, kName, ": the local optimizer refused ", what, ": ", e.what());
  }
  TG_CHECK(built != nullptr, kName, ": the optimizer factory returned null");
  return built;
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group,
                                                 OptimizerFactory factory)
    : ZeroRedundancyOptimizer(std::vector<optim::ParamGroup>{optim::ParamGroup(std::move(params))}, std::move(group),
                              std::move(factory)) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<optim::ParamGroup> groups,
                                                 std::shared_ptr<ProcessGroup> group, OptimizerFactory factory)
    : Optimizer(kName), group_(std::move(group)), factory_(std::move(factory)) {
  TG_CHECK(group_ != nullptr, kName, ": the process group is null");
  TG_CHECK(static_cast<bool>(factory_), kName, ": the optimizer factory is empty");
  // Frozen parameters have nothing to update or broadcast. A plain optimiser here refuses them, but
  // model.parameters() of a partly frozen model is the usual argument (torch.optim takes them and
  // leaves them alone).
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
      if (ps[i].requires_grad()) trained.push_back(ps[i]);
    }
    if (!trained.empty()) kept.push_back(with_params(std::move(trained), groups[g]));
  }
  TG_CHECK(!kept.empty(), kName, ": no parameter that requires grad (", seen.size(),
           " parameters given); an empty list is usually a model whose parameters() was empty");
  // The factory over every parameter fills the groups' options from its defaults and checks them
  // (and the parameters) exactly as the local optimisers will; it allocates no state.
  std::unique_ptr<optim::Optimizer> full = build(factory_, kept, "the parameter groups");
  for (const optim::ParamGroup& g : full->param_groups()) groups_.push_back(g);
  params_ = full->params();
  std::vector<const TensorImpl*> given;
  for (const optim::ParamGroup& g : kept)
    for (const Tensor& p : g.params()) given.push_back(p.impl());
  bool same = params_.size() == given.size();
  for (size_t i = 0; same && i < given.size(); ++i) same = params_[i].impl() == given[i];
  TG_CHECK(same && groups_.size() == kept.size(), kName,
           ": the optimizer factory must build its optimizer over the groups it is given (it returned one with ",
           groups_.size(), " groups of ", params_.size(), " parameters, given ", kept.size(), " groups)");
  // The local optimiser's options in its order (its state dict's), so that state_dict() lists them
  // as a plain optimiser does.
  const std::string first = std::string(kGroupPrefix) + "0.";
  for (const auto& entry : full->state_dict()) {
    if (entry.first.rfind(first, 0) != 0) continue;
    const std::string option = entry.first.substr(first.size());
    if (option != "params" && option != "initial_lr") options_.push_back(option);
  }
  check_same_sizes_on_every_rank();
  partition();
}

// The partition depends only on the sizes, so equal sizes everywhere mean an equal partition; a rank
// that passed other parameters would otherwise broadcast into the wrong tensors.
void ZeroRedundancyOptimizer::check_same_sizes_on_every_rank() {
  std::vector<double> mine = {static_cast<double>(groups_.size())};
  for (const optim::ParamGroup& g : groups_) mine.push_back(static_cast<double>(g.params().size()));
  for (const Tensor& p : params_) mine.push_back(static_cast<double>(p.numel()));
  const std::vector<Tensor> all =
      group_->all_gather(tensor<double>(mine, {static_cast<int64_t>(mine.size())}, TensorOptions().dtype(kFloat64)));
  auto describe = [](const std::vector<double>& v) {
    const size_t groups = static_cast<size_t>(v.at(0));
    const double elements = std::accumulate(v.begin() + 1 + static_cast<std::ptrdiff_t>(groups), v.end(), 0.0);
    return tapegrad::detail::str_cat(v.size() - 1 - groups, " parameters (", static_cast<int64_t>(elements),
                                     " elements) in ", groups, " groups");
  };
  const std::vector<double> first = all.front().tolist<double>();
  for (size_t r = 1; r < all.size(); ++r) {
    const std::vector<double> other = all[r].tolist<double>();
    TG_CHECK(other == first, kName,
             ": every rank must pass parameters of the same sizes, in the same groups and order; rank 0 passed ",
             describe(first), ", rank ", r, " ", describe(other),
             other.size() == first.size() ? " (same count, different sizes)" : "");
  }
}

// PyTorch's partition: group by group, biggest parameter first, each to the least loaded rank.
void ZeroRedundancyOptimizer::partition() {
  const int size = group_->size();
  const int rank = group_->rank();
  std::vector<int64_t> load(static_cast<size_t>(size), 0);
  owner_.assign(params_.size(), -1);
  size_t offset = 0;
  for (const optim::ParamGroup& g : groups_) {
    std::vector<size_t> order(g.params().size());
    std::iota(order.begin(), order.end(), offset);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return params_[a].numel() > params_[b].numel(); });
    for (size_t i : order) {
      const auto least = std::min_element(load.begin(), load.end());
      owner_[i] = static_cast<int>(least - load.begin());
      *least += params_[i].numel();
    }
    offset += g.params().size();
  }
  local_index_.assign(params_.size(), 0);
  std::vector<optim::ParamGroup> local;
  offset = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<Tensor> mine;
    for (size_t i = offset; i < offset + groups_[g].params().size(); ++i) {
      if (owner_[i] != rank) continue;
      local_index_[i] = owned_.size();
      owned_.push_back(i);
      mine.push_back(params_[i]);
    }
    offset += groups_[g].params().size();
    if (mine.empty()) continue;
    local.push_back(with_params(std::move(mine), groups_[g]));
    local_groups_.push_back(g);
  }
  if (!local.empty()) local_ = build(factory_, std::move(local), "this rank's shard");
}

int ZeroRedundancyOptimizer::rank_of(size_t index) const {
  TG_CHECK(index < params_.size(), kName, ".rank_of: parameter index ", index, " out of range for ", params_.size(),
           " parameters");
  return owner_[index];
}

int ZeroRedundancyOptimizer::rank_of(const Tensor& param) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].impl() == param.impl()) return owner_[i];
  TG_CHECK(false, kName, ".rank_of: the tensor is not one of this optimizer's ", params_.size(), " parameters");
  return -1;
}

void ZeroRedundancyOptimizer::sync_local_groups() {
  for (size_t k = 0; k < local_groups_.size(); ++k) copy_options(groups_[local_groups_[k]], local_->param_groups()[k]);
}

void ZeroRedundancyOptimizer::step() {
  // Every rank holds the same groups, so every rank throws here or none does: a rank that threw
  // after its peers entered the broadcasts would leave them waiting for the timeout.
  check_groups();
  consolidated_.clear();
  consolidated_to_ = -1;
  std::string error;
  if (local_) {
    try {
      sync_local_groups();
      local_->step();
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "an exception that is not a std::exception";
    }
  }
  // A rank whose update threw would never join the broadcasts below and leave the others waiting
  // for the timeout: every rank says whether its update went through first.
  const int rank = group_->rank();
  Tensor failed = zeros({group_->size()}, kFloat64);
  if (!error.empty()) failed.data<double>()[rank] = 1;
  group_->all_reduce(failed);
  std::string ranks;
  for (int r = 0; r < group_->size(); ++r)
    if (failed.data<double>()[r] != 0) ranks += tapegrad::detail::str_cat(ranks.empty() ? "" : ", ", r);
  const int64_t step = steps_++;
  if (!ranks.empty())
    TG_CHECK(false, kName, ".step: step ", step, " failed on rank", ranks.find(',') == std::string::npos ? " " : "s ",
             ranks, error.empty() ? "" : tapegrad::detail::str_cat(": ", error),
             "; no parameter was broadcast, so the ranks whose update went through hold shards that the others "
             "do not (the replicas now differ; a failing rank's shard may be partly updated): reload a checkpoint");
  autograd::NoGradGuard no_grad;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (parameter, its contiguous copy that travelled)
  std::vector<Work> works;
  works.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor sent = p.is_contiguous() ? p : p.contiguous();
    if (sent.impl() != p.impl()) copies.emplace_back(p, sent);
    works.push_back(group_->broadcast_async(sent, owner_[i]));
  }
  for (const Work& w : works) w.wait();
  for (auto& [p, sent] : copies) {
    Tensor target = p;
    target.copy_(sent);
  }
}

void ZeroRedundancyOptimizer::fill_defaults(optim::ParamGroup&) const {
  TG_CHECK(false, kName, ".add_param_group: not supported yet; pass every group to the constructor");
}

// Whether the factory's optimiser accepts the options, asked of a one-element stand-in: a rank that
// owns no parameter of the group must reach the same verdict as one that does.
void ZeroRedundancyOptimizer::check_group(const optim::ParamGroup& group, const std::string& where) const {
  Tensor stand_in = zeros({1});
  stand_in.requires_grad_();
  try {
    factory_({with_params({stand_in}, group)});
  } catch (const Error& e) {
    TG_CHECK(false, where, ": ", e.what());
  }
}

StateDict ZeroRedundancyOptimizer::param_state_dict() const {
  TG_CHECK(consolidated_to_ == group_->rank(), kName, ".state_dict: rank ", group_->rank(),
           " holds only its shard; call consolidate_state_dict(", group_->rank(),
           ") on every rank first (after the last step)",
           consolidated_to_ >= 0 ? tapegrad::detail::str_cat(", the state was consolidated to rank ", consolidated_to_)
                                 : "");
  return consolidated_;
}

// Each rank describes its entries (parameter index, field, dtype, device kind, shape) in one
// all_gather; then every entry is broadcast from its owner, and rank `to` keeps them all.
void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  TG_CHECK(to >= 0 && to < group_->size(), kName, ".consolidate_state_dict: rank ", to, " out of range for ",
           group_->size(), " ranks");
  const int rank = group_->rank();
  StateDict local;
  if (local_)
    for (auto& entry : local_->state_dict())
      if (!is_group_entry(entry.first)) local.push_back(std::move(entry));
  std::vector<double> meta;
  for (const auto& [key, t] : local) {
    const auto [index, field] = optim::parse_state_key(key, owned_.size(), kName);
    meta.push_back(static_cast<double>(owned_[index]));
    meta.push_back(static_cast<double>(field.size()));
    for (char c : field) meta.push_back(static_cast<unsigned char>(c));
    meta.push_back(static_cast<double>(static_cast<int>(t.dtype())));
    meta.push_back(t.device().is_cuda() ? 1.0 : 0.0);
    meta.push_back(static_cast<double>(t.dim()));
    for (int64_t s : t.sizes()) meta.push_back(static_cast<double>(s));
  }
  const std::vector<Tensor> described =
      group_->all_gather(tensor<double>(meta, {static_cast<int64_t>(meta.size())}, TensorOptions().dtype(kFloat64)));
  std::vector<std::pair<size_t, std::pair<std::string, Tensor>>> gathered;  // (global index, (field, value))
  autograd::NoGradGuard no_grad;
  for (int r = 0; r < group_->size(); ++r) {
    const std::vector<double> m = described[static_cast<size_t>(r)].tolist<double>();
    size_t at = 0, entry = 0;
    auto next = [&] { return m.at(at++); };
    while (at < m.size()) {
      const size_t index = static_cast<size_t>(next());
      std::string field(static_cast<size_t>(next()), ' ');
      for (char& c : field) c = static_cast<char>(static_cast<int>(next()));
      const DType dtype = static_cast<DType>(static_cast<int>(next()));
      const bool cuda = next() != 0.0;
      Shape shape(static_cast<size_t>(next()));
      for (int64_t& s : shape) s = static_cast<int64_t>(next());
      Tensor value = r == rank
                         ? local[entry].second.contiguous()
                         : empty(shape, TensorOptions().dtype(dtype).device(cuda ? params_[index].device() : kCPU));
      ++entry;
      group_->broadcast(value, r);
      if (rank == to) gathered.push_back({index, {field, r == rank ? value.clone() : value}});
    }
  }
  // The plain optimiser's order: by parameter, each parameter's fields in its optimiser's order.
  std::stable_sort(gathered.begin(), gathered.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  consolidated_.clear();
  for (auto& [index, entry] : gathered)
    consolidated_.emplace_back(std::to_string(index) + "." + entry.first, std::move(entry.second));
  consolidated_to_ = to;
}

// `entries` is a full state (global parameter indices); the local optimiser gets this rank's
// entries renumbered, and the group options `groups` brings.
void ZeroRedundancyOptimizer::load_param_state(const StateDict& entries, const std::vector<optim::ParamGroup>& groups) {
  const int rank = group_->rank();
  StateDict local;
  for (const auto& [key, t] : entries) {
    const auto [index, field] = optim::parse_state_key(key, params_.size(), kName);
    if (owner_[index] == rank) local.emplace_back(std::to_string(local_index_[index]) + "." + field, t);
  }
  if (!local_) return;
  int64_t offset = 0;
  for (size_t k = 0; k < local_groups_.size(); ++k) {
    const optim::ParamGroup& g = groups[local_groups_[k]];
    const std::string prefix = kGroupPrefix + std::to_string(k) + ".";
    const int64_t n = static_cast<int64_t>(local_->param_groups()[k].params().size());
    std::vector<double> indices(static_cast<size_t>(n));
    for (double& i : indices) i = static_cast<double>(offset++);
    local.emplace_back(prefix + "params", tensor<double>(indices, {n}, TensorOptions().dtype(kFloat64)));
    for (const std::string& option : optim::ParamGroup::option_names())
      if (g.has(option)) local.emplace_back(prefix + option, full({}, g.get(option), kFloat64));
  }
  local_->load_state_dict(local);
}

StateDict ZeroRedundancyOptimizer::sharded_state_dict() const {
  StateDict state;
  if (local_)
    for (auto& [key, t] : local_->state_dict()) {
      if (is_group_entry(key)) continue;
      const auto [index, field] = optim::parse_state_key(key, owned_.size(), kName);
      state.emplace_back(std::to_string(owned_[index]) + "." + field, t);
    }
  for (auto& entry : group_state_dict()) state.push_back(std::move(entry));
  std::vector<double> owners(owner_.begin(), owner_.end());
  state.emplace_back("zero.world_size", full({}, group_->size(), kFloat64));
  state.emplace_back("zero.rank", full({}, group_->rank(), kFloat64));
  state.emplace_back("zero.owners", tensor<double>(owners, {int64_t(owners.size())}));
  return state;
}

void ZeroRedundancyOptimizer::load_sharded_state_dict(const StateDict& state) {
  const std::string ctx = tapegrad::detail::str_cat(kName, ".load_sharded_state_dict");
  std::map<std::string, Tensor> meta;
  StateDict rest;
  for (const auto& entry : state) {
    if (entry.first.rfind("zero.", 0) == 0)
      meta[entry.first] = entry.second;
    else
      rest.push_back(entry);
  }
  for (const char* key : {"zero.world_size", "zero.rank", "zero.owners"})
    TG_CHECK(meta.count(key) && meta[key].defined(), ctx, ": '", key,
             "' is missing: not a sharded state dict (a consolidated one loads with load_state_dict)");
  const int64_t world = int64_t(meta["zero.world_size"].item()), saved_rank = int64_t(meta["zero.rank"].item());
  TG_CHECK(world == group_->size(), ctx, ": the state was saved by ", world, " ranks and this group has ",
           group_->size(),
           "; a sharded state resumes on the same world size only (to change it, save with "
           "consolidate_state_dict + state_dict and load that with load_state_dict)");
  TG_CHECK(saved_rank == group_->rank(), ctx, ": the state is rank ", saved_rank, "'s shard, loaded on rank ",
           group_->rank(), " (each rank loads the file it saved)");
  const Tensor owners = meta["zero.owners"].to(kFloat64).contiguous();
  bool same = owners.numel() == int64_t(owner_.size());
  for (int64_t i = 0; same && i < owners.numel(); ++i) same = int(owners.data<double>()[i]) == owner_[size_t(i)];
  TG_CHECK(same, ctx, ": the state was saved under another partition of the parameters (", owners.numel(),
           " parameters saved, ", owner_.size(), " here): the same model and parameter groups are needed");
  for (const auto& [key, t] : rest) {
    if (is_group_entry(key)) continue;
    const auto [index, field] = optim::parse_state_key(key, params_.size(), kName);
    TG_CHECK(owner_[index] == group_->rank(), ctx, ": '", key, "' belongs to rank ", owner_[index], "'s shard");
  }
  load_state_dict(rest);
}

int64_t ZeroRedundancyOptimizer::local_state_bytes() const {
  return local_ ? optimizer_state_bytes(*local_) : 0;
}

int64_t optimizer_state_bytes(const optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& [key, t] : optimizer.state_dict())
    if (!is_group_entry(key)) bytes += t.numel() * static_cast<int64_t>(t.itemsize());
  return bytes;
}

}  // namespace tapegrad::distributed
