// Checkpoints in the Hugging Face safetensors format: named tensors plus string metadata in one
// file that PyTorch, JAX and the `safetensors` Python package read and write (see docs/checkpoints.md).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/core/device.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad {

// Named tensors in a fixed order (a model's state dict). A vector, not a map, so that saving and
// loading keep the order in which parameters were registered.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

// Writes `tensors` (and `metadata`, stored under "__metadata__") to `path`.
// Each tensor is saved by value: views are made contiguous and device tensors are copied to the
// CPU first, so a transposed tensor is stored with its logical (row-major) values. Data is laid out
// in the order of `tensors`. The file is written to a new temporary file with a unique name in
// path's directory (`path.tmp.<pid>.<n>.<random>`, created exclusively, never through a symlink),
// flushed to disk, renamed over `path`, and the directory is synced, so a crash mid-save leaves any
// previous checkpoint intact and concurrent saves to one path each leave a complete file (the last
// rename wins). A process killed mid-save may leave its temporary file behind.
// Throws tapegrad::Error for an undefined tensor, an empty, duplicate or "__metadata__" name, or an
// I/O failure (the temporary file is removed).
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// The tensors of one safetensors file, in file order. It is a StateDict (code that iterates the
// pairs or passes it to Module::load_state_dict is unchanged) that also looks tensors up by name:
//   SafetensorsDict file = load_safetensors("model.safetensors");
//   Tensor w = file.at("fc1.weight");              // throws naming the key and the file
//   if (const Tensor* b = file.find("fc1.bias")) ...  // nullptr when absent
// Lookups scan the list (no index to go stale when the vector is edited).
class SafetensorsDict : public StateDict {
 public:
  SafetensorsDict() = default;
  SafetensorsDict(StateDict tensors, std::string path) : StateDict(std::move(tensors)), path_(std::move(path)) {}
  const std::string& path() const { return path_; }  // the file it was read from

  bool contains(const std::string& name) const { return find(name) != nullptr; }
  const Tensor* find(const std::string& name) const;
  Tensor* find(const std::string& name);
  // Throws tapegrad::Error naming `name` and the file (and a few of the names it holds) when absent.
  const Tensor& at(const std::string& name) const;
  Tensor& at(const std::string& name);
  using StateDict::at;  // at(position) still reaches the pair

 private:
  std::string path_;
};

// Reads every tensor of a safetensors file into new tensors on `device`, returned in the order of
// their data offsets in the file (the order they were saved in; empty tensors sharing an offset
// keep the order of the header), with lookup by name (SafetensorsDict above). The file is
// validated before anything large is allocated.
// Throws tapegrad::Error, naming the file, when it cannot be read, is truncated, its header is not
// valid JSON or not an object, has duplicate names, an entry lacks or mistypes dtype/shape/
// data_offsets, a dtype is unknown, a shape entry is negative or not an integer, an entry's byte
// size disagrees with its shape, or the entries overlap, leave holes or run past the data section.
SafetensorsDict load_safetensors(const std::string& path, Device device = kCPU);

// The "__metadata__" map of a safetensors file (empty when it has none). Reads and validates only
// the header; throws like load_safetensors.
std::map<std::string, std::string> load_safetensors_metadata(const std::string& path);

}  // namespace tapegrad
