// Emulation build: what CUDA device code sees (execution-space keywords, the built-in index
// variables, barriers, warp shuffles and votes, atomics, shared arrays, the intrinsics tapegrad's
// kernels use), for kernels compiled by the host compiler and run by the emulator's grid runner
// (grid_runner.cpp): each CUDA thread is a fiber, so a barrier or a shuffle suspends it until the
// threads it waits for arrive, and the runner checks CUDA's rules at every such meeting point.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_emulator/keywords.h"
#include "cuda_fp16.h"

struct uint3 {
  unsigned int x, y, z;
};

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}  // NOLINT: implicit, as CUDA's
};

namespace tapegrad_emu {

// The CUDA thread the calling fiber is running: its indices and the launch's shape.
struct ThreadIndex {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

// Set by the grid runner before it resumes a thread's fiber; null outside kernels. Initial-exec:
// kernels read it on every use of threadIdx and friends, and the emulator is never dlopen'ed.
extern thread_local const ThreadIndex* tls_thread __attribute__((tls_model("initial-exec")));

// Device-only built-ins used outside a kernel are our bug, reported like any violation.
const ThreadIndex& thread_index_checked();

inline const ThreadIndex& this_thread() {
  const ThreadIndex* t = tls_thread;
  return t != nullptr ? *t : thread_index_checked();
}

// Meeting points, implemented by the grid runner. Values travel as up to 8 raw bytes.
enum class WarpOp { Shfl, ShflUp, ShflDown, ShflXor, Ballot, Any, All, SyncWarp };
void sync_block();
// cooperative_groups' grid.sync(): only in a cooperative launch (grid_runner.cpp).
void sync_grid();
// The running block's dynamic shared memory (the launch's bytes, poisoned when the block starts).
void* dynamic_shared();
uint64_t warp_exchange(WarpOp op, unsigned mask, uint64_t value, int arg, int width);

// A static shared array of `bytes` for the site `key` in the running block (one per site per
// block, poisoned when the block starts, counted against the 48 KiB static limit).
void* shared_array(const void* key, size_t bytes, size_t align, const char* name);

template <class T>
T shuffle_as(WarpOp op, unsigned mask, T value, int arg, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = warp_exchange(op, mask, bits, arg, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace tapegrad_emu

#define threadIdx (::tapegrad_emu::this_thread().thread_idx)
#define blockIdx (::tapegrad_emu::this_thread().block_idx)
#define blockDim (::tapegrad_emu::this_thread().block_dim)
#define gridDim (::tapegrad_emu::this_thread().grid_dim)
constexpr int warpSize = 32;

// A static __shared__ array, as cuda/kernels/launch.h declares one. The address of a function-local static
// names the site: one per declaration and per kernel instantiation.
#define TG_SHARED_ARRAY(type, name, count)     \
  static const char name##_emulated_site_ = 0; \
  type* name = static_cast<type*>(             \
      ::tapegrad_emu::shared_array(&name##_emulated_site_, sizeof(type) * (count), alignof(type), #name))

// The launch's dynamic shared memory, as cuda/kernels/launch.h declares it (extern __shared__ there).
#define TG_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::tapegrad_emu::dynamic_shared())

inline void __syncthreads() {
  ::tapegrad_emu::sync_block();
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)::tapegrad_emu::warp_exchange(::tapegrad_emu::WarpOp::SyncWarp, mask, 0, 0, 32);
}

template <class T>
T __shfl_sync(unsigned mask, T value, int src_lane, int width = 32) {
  return ::tapegrad_emu::shuffle_as(::tapegrad_emu::WarpOp::Shfl, mask, value, src_lane, width);
}
template <class T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  return ::tapegrad_emu::shuffle_as(::tapegrad_emu::WarpOp::ShflUp, mask, value, static_cast<int>(delta), width);
}
template <class T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  return ::tapegrad_emu::shuffle_as(::tapegrad_emu::WarpOp::ShflDown, mask, value, static_cast<int>(delta), width);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  return ::tapegrad_emu::shuffle_as(::tapegrad_emu::WarpOp::ShflXor, mask, value, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return static_cast<unsigned>(
      ::tapegrad_emu::warp_exchange(::tapegrad_emu::WarpOp::Ballot, mask, predicate != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int predicate) {
  return static_cast<int>(::tapegrad_emu::warp_exchange(::tapegrad_emu::WarpOp::Any, mask, predicate != 0, 0, 32));
}
inline int __all_sync(unsigned mask, int predicate) {
  return static_cast<int>(::tapegrad_emu::warp_exchange(::tapegrad_emu::WarpOp::All, mask, predicate != 0, 0, 32));
}

// Atomics. The runner executes one CUDA thread at a time per grid, so a plain read-modify-write
// is atomic here; the return value is the old one, as on the device.
template <class T>
T __emu_atomic_add(T* address, T value) {
  T old = *address;
  *address = static_cast<T>(old + value);
  return old;
}
inline float atomicAdd(float* a, float v) {
  return __emu_atomic_add(a, v);
}
inline double atomicAdd(double* a, double v) {
  return __emu_atomic_add(a, v);
}
inline int atomicAdd(int* a, int v) {
  return __emu_atomic_add(a, v);
}
inline unsigned atomicAdd(unsigned* a, unsigned v) {
  return __emu_atomic_add(a, v);
}
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
  return __emu_atomic_add(a, v);
}
inline __half atomicAdd(__half* a, __half v) {
  __half old = *a;
  *a = __half(static_cast<float>(old) + static_cast<float>(v));
  return old;
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* a, __nv_bfloat16 v) {
  __nv_bfloat16 old = *a;
  *a = __nv_bfloat16(static_cast<float>(old) + static_cast<float>(v));
  return old;
}
template <class T>
T atomicExch(T* a, T v) {
  T old = *a;
  *a = v;
  return old;
}
template <class T>
T atomicCAS(T* a, T compare, T v) {
  T old = *a;
  if (old == compare) *a = v;
  return old;
}
template <class T>
T atomicMax(T* a, T v) {
  T old = *a;
  if (v > old) *a = v;
  return old;
}
template <class T>
T atomicMin(T* a, T v) {
  T old = *a;
  if (v < old) *a = v;
  return old;
}

template <class T>
T __ldg(const T* p) {
  return *p;
}
// A load that bypasses L1 (another block's writes after a grid barrier); one memory here.
template <class T>
T __ldcg(const T* p) {
  return *p;
}

// Arithmetic intrinsics: IEEE round-to-nearest, never contracted into an FMA (the host build
// does not contract).
inline double __dmul_rn(double a, double b) {
  return a * b;
}
inline double __dadd_rn(double a, double b) {
  return a + b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fadd_rn(float a, float b) {
  return a + b;
}

// CUDA's global min/max overloads.
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline unsigned min(unsigned a, unsigned b) {
  return a < b ? a : b;
}
inline long min(long a, long b) {
  return a < b ? a : b;
}
inline unsigned long min(unsigned long a, unsigned long b) {
  return a < b ? a : b;
}
inline long long min(long long a, long long b) {
  return a < b ? a : b;
}
inline unsigned long long min(unsigned long long a, unsigned long long b) {
  return a < b ? a : b;
}
inline float min(float a, float b) {
  return std::fmin(a, b);
}
inline double min(double a, double b) {
  return std::fmin(a, b);
}
inline int max(int a, int b) {
  return a > b ? a : b;
}
inline unsigned max(unsigned a, unsigned b) {
  return a > b ? a : b;
}
inline long max(long a, long b) {
  return a > b ? a : b;
}
inline unsigned long max(unsigned long a, unsigned long b) {
  return a > b ? a : b;
}
inline long long max(long long a, long long b) {
  return a > b ? a : b;
}
inline unsigned long long max(unsigned long long a, unsigned long long b) {
  return a > b ? a : b;
}
inline float max(float a, float b) {
  return std::fmax(a, b);
}
inline double max(double a, double b) {
  return std::fmax(a, b);
}
