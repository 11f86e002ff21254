// summary(): one forward pass with a hook on every module, then a torchinfo-like table.
#include "tapegrad/nn/summary.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/core/error.h"

namespace tapegrad::nn {
namespace {

int64_t tensor_bytes(const Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.itemsize()) : 0;
}

// 517642 -> "517,642"
std::string with_commas(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

std::string megabytes(int64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.2f", static_cast<double>(bytes) / 1e6);  // torchinfo's MB
  return buffer;
}

std::string shapes_text(const LayerSummary& layer) {
  if (layer.calls == 0) return "--";
  std::string out;
  for (size_t i = 0; i < layer.output_shapes.size(); ++i) out += (i ? ", " : "") + shape_str(layer.output_shapes[i]);
  if (layer.calls > 1) out += " (" + std::to_string(layer.calls) + " calls)";
  return out;
}

std::string trainable_text(const LayerSummary& layer) {
  if (layer.num_params == 0) return "--";
  if (layer.trainable_params == layer.num_params) return "True";
  return layer.trainable_params == 0 ? "False" : "Partial";
}

std::string pad(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

std::string render(const ModelSummary& s) {
  const std::vector<std::string> header{"Layer (type (name))", "Output Shape", "Param #", "Trainable"};
  std::vector<std::vector<std::string>> rows;
  for (const LayerSummary& layer : s.layers) {
    std::string label = std::string(2 * layer.depth, ' ') + layer.type;
    if (!layer.name.empty()) label += " (" + layer.name + ")";
    rows.push_back(
        {label, shapes_text(layer), layer.num_params ? with_commas(layer.num_params) : "--", trainable_text(layer)});
  }
  std::vector<size_t> widths;
  for (size_t c = 0; c < header.size(); ++c) {
    size_t w = header[c].size();
    for (const auto& row : rows) w = std::max(w, row[c].size());
    widths.push_back(w + 4);
  }
  size_t total_width = 0;
  for (size_t w : widths) total_width += w;
  const std::string rule(total_width - 4, '=');
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < cells.size(); ++c) out += c + 1 < cells.size() ? pad(cells[c], widths[c]) : cells[c];
    return out + "\n";
  };
  std::ostringstream out;
  out << rule << "\n" << line(header) << rule << "\n";
  for (const auto& row : rows) out << line(row);
  out << rule << "\n";
  out << "Total params: " << with_commas(s.total_params) << "\n";
  out << "Trainable params: " << with_commas(s.trainable_params) << "\n";
  out << "Non-trainable params: " << with_commas(s.non_trainable_params) << "\n";
  out << rule << "\n";
  out << "Input size (MB): " << megabytes(s.input_bytes) << "\n";
  out << "Forward pass activations (MB): " << megabytes(s.activation_bytes) << "\n";
  out << "Params size (MB): " << megabytes(s.param_bytes) << "\n";
  out << "Gradients size (MB): " << megabytes(s.gradient_bytes) << "\n";
  out << "Optimizer state size (MB): " << megabytes(s.optimizer_state_bytes) << "\n";
  out << "Estimated total size (MB): " << megabytes(s.total_bytes) << "\n";
  out << rule << "\n";
  return out.str();
}

}  // namespace

ModelSummary summary(Module& model, const std::function<void()>& run_forward, const SummaryOptions& options) {
  TG_CHECK(options.optimizer_state_bytes_per_element >= 0,
           "summary: optimizer_state_bytes_per_element must be >= 0, got ", options.optimizer_state_bytes_per_element);
  TG_CHECK(static_cast<bool>(run_forward), "summary: run_forward is empty");
  ModelSummary s;
  const NamedModules modules = model.named_modules();
  s.layers.resize(modules.size());
  std::vector<RemovableHandle> handles;
  // Removes the hooks also when the forward throws.
  struct Remover {
    std::vector<RemovableHandle>& handles;
    ~Remover() {
      for (RemovableHandle& h : handles) h.remove();
    }
  } remover{handles};
  for (size_t i = 0; i < modules.size(); ++i) {
    const auto& [name, module] = modules[i];
    LayerSummary& layer = s.layers[i];
    layer.name = name;
    layer.type = module->name();
    layer.depth = name.empty() ? 0 : 1 + static_cast<int>(std::count(name.begin(), name.end(), '.'));
    layer.is_leaf = module->named_children().empty();
    for (const auto& [param_name, p] : module->named_parameters(/*recurse=*/false)) {
      if (!p.defined()) continue;
      layer.num_params += p.numel();
      if (p.requires_grad()) layer.trainable_params += p.numel();
    }
    const bool is_root = i == 0;
    handles.push_back(module->register_forward_hook(
        [&layer, &s, is_root](Module&, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
          if (layer.calls++ == 0) {
            for (const Tensor& t : outputs)
              if (t.defined()) layer.output_shapes.push_back(t.sizes());
            if (is_root)
              for (const Tensor& t : inputs) s.input_bytes += tensor_bytes(t);
          }
          for (const Tensor& t : outputs) layer.output_bytes += tensor_bytes(t);
        }));
  }
  {
    NoGradGuard no_grad;
    run_forward();
  }

  for (const Tensor& p : model.parameters()) {  // each tensor once, also when modules share it
    if (!p.defined()) continue;
    s.total_params += p.numel();
    s.param_bytes += tensor_bytes(p);
    if (p.requires_grad()) {
      s.trainable_params += p.numel();
      s.gradient_bytes += tensor_bytes(p);
    }
  }
  s.non_trainable_params = s.total_params - s.trainable_params;
  s.optimizer_state_bytes =
      static_cast<int64_t>(options.optimizer_state_bytes_per_element * static_cast<double>(s.trainable_params) + 0.5);
  for (const LayerSummary& layer : s.layers) {
    if (!layer.is_leaf) continue;
    s.activation_bytes += layer.output_bytes;
    if (layer.num_params > 0) s.torchinfo_pass_bytes += 2 * layer.output_bytes;
  }
  s.total_bytes = s.input_bytes + s.param_bytes + s.gradient_bytes + s.optimizer_state_bytes + s.activation_bytes;
  s.table = render(s);
  return s;
}

ModelSummary summary(UnaryModule& model, const Tensor& example_input, const SummaryOptions& options) {
  TG_CHECK(example_input.defined(), "summary: example_input is undefined");
  return summary(
      static_cast<Module&>(model), [&] { model(example_input); }, options);
}

}  // namespace tapegrad::nn
