// The CPU backend's kernel families. A family is one file (in kernels/, gemm/ or runtime/) whose
// kernels are private to it and that ends with its `void register_<family>(backend::KernelTable& t)`,
// filling the family's slots of the table; the slots are the kernels' interface, and their signatures
// and overwrite/accumulate contracts are those of backend/kernel_slots.def. The build finds the
// register functions in the sources and lists them (cmake/KernelFamilies.cmake), so adding a family
// is adding its file: this header declares them from that list and cpu_backend.cpp calls them.
#pragma once

#include "backend/kernel_table.h"

namespace tapegrad::cpu {

// The op kinds of the slot signatures, named once for every CPU file.
using backend::BinaryOp;
using backend::CompareOp;
using backend::ReduceOp;
using backend::UnaryOp;

#define TG_KERNEL_FAMILY(family) void register_##family(backend::KernelTable& t);
#include "cpu_kernel_families.inc"
#undef TG_KERNEL_FAMILY

// half/widening.cpp: the 16-bit layer over the float32-only kernels flagged TG_WIDEN_16BIT in
// backend/kernel_slots.def. Not in the generated list: it runs last, as it wraps what the families
// registered.
void register_16bit_widening(backend::KernelTable& t);

}  // namespace tapegrad::cpu
