// Reading scheduler state dicts: named float64 numbers, each checked before anything is changed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tapegrad/optim/optimizer.h"

namespace tapegrad::optim {

// The entries of `state` by key; throws, naming `scheduler`, for an undefined tensor, a key listed
// twice or a key not in `known`.
std::map<std::string, Tensor> scheduler_entries(const StateDict& state, const std::vector<std::string>& known,
                                                const char* scheduler);

// entries[key] as numbers; throws when the key is missing or holds other than `count` values
// (count -1: any).
std::vector<double> read_numbers(const std::map<std::string, Tensor>& entries, const std::string& key, int64_t count,
                                 const char* scheduler);

// entries[key] as one whole number >= 0 (an epoch or a counter).
int64_t read_count(const std::map<std::string, Tensor>& entries, const std::string& key, const char* scheduler);

Tensor number_tensor(double value);
Tensor numbers_tensor(const std::vector<double>& values);

}  // namespace tapegrad::optim
