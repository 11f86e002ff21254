// Storage: owns device bytes through the deleter its allocator (or the caller) supplied.
#include "tapegrad/core/storage.h"

#include "tapegrad/autograd/grad_mode.h"

namespace tapegrad {

Storage::Storage(size_t nbytes, Device device, Allocator& allocator)
    : data_(allocator.allocate(nbytes, device)),
      nbytes_(nbytes),
      device_(device),
      inference_(autograd::inference_mode_enabled()) {}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_{data, std::move(deleter)},
      nbytes_(nbytes),
      device_(device),
      inference_(autograd::inference_mode_enabled()) {}

Storage::~Storage() {
  if (data_.deleter) data_.deleter(data_.ptr);
}

}  // namespace tapegrad
