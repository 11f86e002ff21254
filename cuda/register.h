// The CUDA backend's kernel families, one register function each. A family's file ends with its
// `void register_<family>(backend::KernelTable& table)`, which fills the family's slots of the kernel
// table (backend/kernel_slots.def) with the file's own, private, launchers. The build finds those
// functions in the sources it compiles and lists them (cmake/KernelFamilies.cmake): this header
// declares them from that list and cuda_backend.cpp calls them, so a new family is its file alone.
// The table in README.md says which family fills which slots.
#pragma once

#include "backend/kernel_table.h"

namespace tapegrad::cuda_backend {

#define TG_KERNEL_FAMILY(family) void register_##family(backend::KernelTable& table);
#include "cuda_kernel_families.inc"
#undef TG_KERNEL_FAMILY

}  // namespace tapegrad::cuda_backend
