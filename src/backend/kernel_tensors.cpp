// Kernel-side tensor allocation and copies (see kernel_tensors.h).
#include "backend/kernel_tensors.h"

#include <memory>
#include <new>

#include "backend/kernel_table.h"

namespace tapegrad::backend {

Tensor allocate_tensor(const Shape& sizes, DType dtype, Device device, const char* op) {
  const size_t nbytes = checked_nbytes(op, sizes, dtype_size(dtype));
  const KernelTable& table = kernels(device);
  TG_CHECK(table.allocator != nullptr, "no ", device_kind_name(device.kind()),
           " allocator: this build or machine has no ", device, " backend");
  std::shared_ptr<Storage> storage;
  try {
    storage = std::make_shared<Storage>(nbytes, device, *table.allocator);
  } catch (const std::bad_alloc&) {
    // An allocator that reports exhaustion the C++ way (or a failed bookkeeping allocation):
    // say what ran out, like the allocators' own errors.
    TG_CHECK(false, op, ": out of memory allocating ", nbytes, " bytes for a ", dtype, " tensor of shape ",
             shape_str(sizes), " on ", device);
  } catch (const Error& e) {
    TG_CHECK(false, op, ": ", e.what(), " (a ", dtype, " tensor of shape ", shape_str(sizes), ")");
  }
  TG_ASSERT(storage->data() != nullptr || nbytes == 0, "the ", device, " allocator returned no memory for ", nbytes,
            " bytes");
  return Tensor(std::move(storage), 0, sizes, contiguous_strides(sizes), dtype);
}

Tensor contiguous_copy(const Tensor& t, const char* op) {
  Tensor c = allocate_tensor(t.sizes(), t.dtype(), t.device(), op);
  if (c.numel() > 0) TG_KERNEL(t.device(), copy)(t, c);
  return c;
}

}  // namespace tapegrad::backend
