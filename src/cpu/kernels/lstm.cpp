// The whole recurrence of an LSTM layer on the CPU, parallel over slices of the batch; the cell's
// pointwise step is one pass over a row's gates.
// Float runs the shared formulas with the vectorisable activations of vec_math.h, compiled per
// instruction set; double keeps the math library's (the gradchecks).
#include "math/lstm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <type_traits>
#include <vector>

#include "backend/kernel_tensors.h"
#include "cpu/gemm/gemm_rows.h"
#include "cpu/gemm/gemv_avx512.h"
#include "cpu/gemm/sbgemm.h"
#include "cpu/gemm/sgemm_avx512.h"
#include "cpu/kernels/lstm_split.h"
#include "cpu/kernels/lstm_weight_layout.h"
#include "cpu/kernels/shared_kernels.h"
#include "cpu/loops/dtype_dispatch.h"
#include "cpu/loops/parallel.h"
#include "cpu/loops/step_barrier.h"
#include "cpu/loops/vec_math.h"
#include "cpu/loops/vec_math_avx512.h"

namespace tapegrad::cpu {

namespace {

bool row_active(const int64_t* lengths, int64_t b, int64_t t) {
  return lengths == nullptr || t < lengths[b];
}

// Note [the cell in two passes]: one element of the forward cell is a long chain of dependent
// operations (exponential, division, the new c, then tanh(c): another exponential and division),
// about 200 instructions for 16 float lanes, so the core's reorder window holds two or three
// iterations of a loop that runs all of it, and the chains' latency, not the arithmetic units, sets
// the pace. Run as two loops, the gates and c first, then h from c, each iteration's chain is half as
// long and more of them overlap. Each element sees the same operations in the same order, so the
// bits do not change. One Zen 5 core, bench_kernels: an lstm_small forward at batch 64 2774-2824 ->
// 2604-2677 us. The backward, whose chain after tanh(c) is a few multiplies, gained nothing from
// the same split (tanh(c) first through a buffer) and keeps one loop.

// One active row of the cell. Gates are [4H] (i, f, g, o), the rest [H]. The restrict-qualified
// parameters say the streams do not overlap, so the loop vectorises without overlap checks; the
// float versions are separate functions taking them as parameters (restrict survives that, not
// inlining into a caller that derives all four gate pointers from one), compiled per instruction set.
template <class T, class Act>
TG_ALWAYS_INLINE void forward_row(T* __restrict zi, T* __restrict zf, T* __restrict zg, T* __restrict zo,
                                  const T* __restrict c_prev, T* __restrict c_new, T* __restrict h_new,
                                  int64_t hidden) {
  for (int64_t j = 0; j < hidden; ++j) c_new[j] = math::lstm_cell_gates<T, Act>(zi[j], zf[j], zg[j], zo[j], c_prev[j]);
  for (int64_t j = 0; j < hidden; ++j) h_new[j] = math::lstm_cell_hidden<T, Act>(zo[j], c_new[j]);
}

template <class T, class Act>
TG_ALWAYS_INLINE void backward_row(const T* __restrict i, const T* __restrict f, const T* __restrict g,
                                   const T* __restrict o, const T* __restrict c_prev, const T* __restrict c_new,
                                   T* __restrict dh, T* __restrict dc, T* __restrict dzi, T* __restrict dzf,
                                   T* __restrict dzg, T* __restrict dzo, int64_t hidden) {
  for (int64_t j = 0; j < hidden; ++j) {
    math::lstm_cell_backward<T, Act>(i[j], f[j], g[j], o[j], c_prev[j], c_new[j], dh[j], &dc[j], &dzi[j], &dzf[j],
                                     &dzg[j], &dzo[j]);
    dh[j] = T(0);  // an active row's dh_prev comes only through the recurrent GEMM
  }
}

TG_VECTOR_CLONES void forward_row_f32(float* __restrict zi, float* __restrict zf, float* __restrict zg,
                                      float* __restrict zo, const float* __restrict c_prev, float* __restrict c_new,
                                      float* __restrict h_new, int64_t hidden) {
  forward_row<float, vec::FastActivations>(zi, zf, zg, zo, c_prev, c_new, h_new, hidden);
}

TG_VECTOR_CLONES void backward_row_f32(const float* __restrict i, const float* __restrict f, const float* __restrict g,
                                       const float* __restrict o, const float* __restrict c_prev,
                                       const float* __restrict c_new, float* __restrict dh, float* __restrict dc,
                                       float* __restrict dzi, float* __restrict dzf, float* __restrict dzg,
                                       float* __restrict dzo, int64_t hidden) {
  backward_row<float, vec::FastActivations>(i, f, g, o, c_prev, c_new, dh, dc, dzi, dzf, dzg, dzo, hidden);
}

std::atomic<bool> cell_in_registers_on{true};

#ifdef TG_HAVE_VEC_MATH_AVX512
// Note [activations in AVX-512 registers] (cpu/loops/vec_math_avx512.h): forward_row_f32's cell
// with the activations in registers, in the same two passes (Note [the cell in two passes]) and with
// the same operations (the new c is f c_prev + (i g), one multiply-add, as GCC contracts it there),
// so the same bits. The last vector's lanes past the row read and write nothing; the full vectors'
// loads and stores are plain ones (vec512::for_each_vector): the second pass reads the c and o the
// first just wrote.
__attribute__((target("avx512f"))) void forward_row_avx512(float* zi, float* zf, float* zg, float* zo,
                                                           const float* c_prev, float* c_new, float* h_new,
                                                           int64_t hidden) {
  vec512::for_each_vector(hidden, [&](int64_t j, __mmask16 m) TG_AVX512_LAMBDA {
    const __m512 i = vec512::sigmoid(_mm512_maskz_loadu_ps(m, zi + j));
    const __m512 f = vec512::sigmoid(_mm512_maskz_loadu_ps(m, zf + j));
    const __m512 g = vec512::tanh(_mm512_maskz_loadu_ps(m, zg + j));
    const __m512 o = vec512::sigmoid(_mm512_maskz_loadu_ps(m, zo + j));
    _mm512_mask_storeu_ps(zi + j, m, i);
    _mm512_mask_storeu_ps(zf + j, m, f);
    _mm512_mask_storeu_ps(zg + j, m, g);
    _mm512_mask_storeu_ps(zo + j, m, o);
    _mm512_mask_storeu_ps(c_new + j, m, _mm512_fmadd_ps(f, _mm512_maskz_loadu_ps(m, c_prev + j), _mm512_mul_ps(i, g)));
  });
  vec512::for_each_vector(hidden, [&](int64_t j, __mmask16 m) TG_AVX512_LAMBDA {
    const __m512 tanh_c = vec512::tanh(_mm512_maskz_loadu_ps(m, c_new + j));
    _mm512_mask_storeu_ps(h_new + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, zo + j), tanh_c));
  });
}
#endif

// One active row's forward cell in float32: in registers where the CPU has AVX-512.
void forward_cell_f32(float* zi, float* zf, float* zg, float* zo, const float* c_prev, float* c_new, float* h_new,
                      int64_t hidden) {
#ifdef TG_HAVE_VEC_MATH_AVX512
  if (vec512::available() && cell_in_registers_on.load(std::memory_order_relaxed)) {
    forward_row_avx512(zi, zf, zg, zo, c_prev, c_new, h_new, hidden);
    return;
  }
#endif
  forward_row_f32(zi, zf, zg, zo, c_prev, c_new, h_new, hidden);
}

// z: the row's [4H] gates.
void forward_active(float* z, const float* c_prev, float* c_new, float* h_new, int64_t hidden) {
  forward_cell_f32(z, z + hidden, z + 2 * hidden, z + 3 * hidden, c_prev, c_new, h_new, hidden);
}
void forward_active(double* z, const double* c_prev, double* c_new, double* h_new, int64_t hidden) {
  forward_row<double, math::LibmActivations>(z, z + hidden, z + 2 * hidden, z + 3 * hidden, c_prev, c_new, h_new,
                                             hidden);
}

// a: the row's [4H] activated gates, dz: their gradients.
void backward_active(const float* a, const float* c_prev, const float* c_new, float* dh, float* dc, float* dz,
                     int64_t hidden) {
  backward_row_f32(a, a + hidden, a + 2 * hidden, a + 3 * hidden, c_prev, c_new, dh, dc, dz, dz + hidden,
                   dz + 2 * hidden, dz + 3 * hidden, hidden);
}
void backward_active(const double* a, const double* c_prev, const double* c_new, double* dh, double* dc, double* dz,
                     int64_t hidden) {
  backward_row<double, math::LibmActivations>(a, a + hidden, a + 2 * hidden, a + 3 * hidden, c_prev, c_new, dh, dc, dz,
                                              dz + hidden, dz + 2 * hidden, dz + 3 * hidden, hidden);
}

// Rows [b0, b1) of one step. z: the step's gates [B, 4H] (pre-activations in, activations out);
// the states [B, H]. A finished row passes its state through and gets zero gates.
template <class T>
void forward_rows(T* z, const T* hp, const T* cp, T* hn, T* cn, const int64_t* len, int64_t t, int64_t hidden,
                  int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    T* zr = z + b * 4 * hidden;
    const int64_t r = b * hidden;
    if (!row_active(len, b, t)) {
      for (int64_t j = 0; j < hidden; ++j) {
        hn[r + j] = hp[r + j];
        cn[r + j] = cp[r + j];
      }
      for (int64_t j = 0; j < 4 * hidden; ++j) zr[j] = T(0);
      continue;
    }
    forward_active(zr, cp + r, cn + r, hn + r, hidden);
  }
}

// Rows [b0, b1) of one step backward: a the step's activations, dz_b0 the gate gradients of row b0,
// the slice's rows following it (written).
template <class T>
void backward_rows(const T* a, const T* cp, const T* cn, T* dhp, T* dcp, T* dz_b0, const int64_t* len, int64_t t,
                   int64_t hidden, int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    T* dzr = dz_b0 + (b - b0) * 4 * hidden;
    const int64_t r = b * hidden;
    if (!row_active(len, b, t)) {  // state passed through: so do its gradients
      for (int64_t j = 0; j < 4 * hidden; ++j) dzr[j] = T(0);
      continue;
    }
    backward_active(a + b * 4 * hidden, cp + r, cn + r, dhp + r, dcp + r, dzr, hidden);
  }
}

// row[j] += values[j] for j < n (values converted to the row's type).
template <class T, class V>
TG_ALWAYS_INLINE void add_row_loop(T* __restrict row, const V* __restrict values, int64_t n) {
  for (int64_t j = 0; j < n; ++j) row[j] += static_cast<T>(values[j]);
}
template <class T, class V>
void add_row(T* row, const V* values, int64_t n) {
  add_row_loop(row, values, n);
}
// The float rows summed in double (the bias gradients) and in float (the partial weight gradients):
// compiled per instruction set like the cell. As a plain function, built for the baseline, the bias
// gradients' sum (a float row converted and added to doubles, two lanes at a time) took as long as
// the backward cell: 0.21 ms of lstm_small:64's 3.3 ms backward, per thread.
TG_VECTOR_CLONES void add_row_f32(double* __restrict row, const float* __restrict values, int64_t n) {
  add_row_loop(row, values, n);
}
TG_VECTOR_CLONES void add_row_f32(float* __restrict row, const float* __restrict values, int64_t n) {
  add_row_loop(row, values, n);
}
void add_row(double* row, const float* values, int64_t n) {
  add_row_f32(row, values, n);
}
void add_row(float* row, const float* values, int64_t n) {
  add_row_f32(row, values, n);
}

const int64_t* lengths_data(const Tensor& lengths) {
  return lengths.defined() ? static_cast<const int64_t*>(lengths.data_ptr()) : nullptr;
}

// Note [batch-parallel recurrence]: the rows of a batch are independent through the whole
// recurrence (row b of step t's product needs only row b of h_{t-1}), so each thread can take a
// slice of the batch and run every timestep on it alone: one parallel region for the sequence
// instead of two per step, no barrier between steps, and each thread's product reads its own rows
// only. A thread gets at least kMinRowsPerThread rows, and the sequence must hold enough work
// (kMinRecurrenceMacs) to pay for waking the team once.
constexpr int64_t kMinRowsPerThread = 4;
constexpr int64_t kMinRecurrenceMacs = int64_t{1} << 20;

// The team for a sequence whose steps each multiply [B, input + H] by [input + H, 4H].
int recurrence_threads(int64_t steps, int64_t batch, int64_t hidden, int64_t input) {
  const int threads = get_num_threads();
  const int64_t macs = steps * batch * (input + hidden) * 4 * hidden;
  if (threads <= 1 || omp_in_parallel() || macs < kMinRecurrenceMacs) return 1;
  return static_cast<int>(std::clamp<int64_t>(batch / kMinRowsPerThread, 1, threads));
}

// Note [recurrent weights laid out as panels]: a batch-sliced step multiplies a few rows by all of
// its weights, read in place (Note [B laid out once for many products] in sgemm_avx512.cpp): the
// forward's w_t, the backward's W_hh. From kPanelsFromBytes of weights on, they are laid out once
// per sequence as sgemm_avx512's panels instead, the same bits. Below it they stay in a core's L2
// either way, and the layout's extra pass would not pay (lstm_small's 320 KiB: 37.3 against 36.6
// us a step's product on each of two threads).
constexpr int64_t kPanelsFromBytes = int64_t{1} << 20;

std::atomic<bool> weight_panels_on{true};

// Whether a step's float32 products [rows, depth] x [depth, width] read their weights laid out as
// panels.
bool panels_pay(int64_t rows, int64_t width, int64_t depth) {
  return weight_panels_on.load(std::memory_order_relaxed) && rows > 1 &&
         depth * width * int64_t{sizeof(float)} >= kPanelsFromBytes && sgemm_avx512_available() &&
         use_sgemm_avx512(rows, width, depth);
}

// Calls run(b0, b1, part, parts) for each thread's slice [b0, b1) of [0, batch), part 0 to
// parts - 1 in batch order, on `team` threads (parts: as many as OpenMP gives). Every part gets a
// call, so run may wait for the others: recurrence_threads gives each at least one row.
template <class F>
void over_batch_slices(int team, int64_t batch, const F& run) {
  if (team <= 1) {
    run(int64_t{0}, batch, 0, 1);
    return;
  }
  TG_ASSERT(team <= batch, "lstm: a team of ", team, " for ", batch, " rows would leave a slice empty");
#pragma omp parallel num_threads(team)
  {
    const int64_t parts = omp_get_num_threads(), part = omp_get_thread_num();
    run(batch * part / parts, batch * (part + 1) / parts, static_cast<int>(part), static_cast<int>(parts));
  }
}

// Note [batch-1 recurrence split by hidden units]: one row cannot be split by batch, and its step
// is a matrix-vector product [1, I + H] x [I + H, 4H] that reads every weight once: at I = 32,
// H = 128 that is 320 KiB per step, 50 steps a sequence, so the recurrence runs at the speed the
// core's L2 streams its weights (Note [unit panels]: packed so that the stream is sequential). Two
// cores have two L2s. Thread p takes hidden units [u0, u1) and with them the four gate columns of
// each (i, f, g, o); it multiplies only those columns (its panels stay in its own L2 from step to
// step), runs the cell for its units and writes its part of h_t and c_t. One barrier per step then
// makes the whole h_t visible to the next product. The backward splits the same way: the cell
// backward for its units, a barrier, then dh_prev for its units from every gate gradient (its
// columns of W_hh). Every product keeps its elements' chains (Note [segmented columns]) and the
// parts start at multiples of 16 units, so any team gives one thread's bits, which are those of
// the general path's gemv_columns_avx512. A barrier costs 0.1-0.3 us between two cores here (more
// when they sit on different CCDs), a step's product about 1.5 us on one core: a team needs at
// least kMinUnitsPerThread units each.
constexpr int64_t kMinUnitsPerThread = 32;
// The split is measured against one thread (Note [measured choice of the split]), so it may
// be offered for any call whose weights outgrow L1 many times over: 2^17 multiply-adds is 512 KiB
// of weights per call, e.g. one streaming step of a 256-unit layer (which reads 1.3-2 MiB).
constexpr int64_t kMinSplitMacs = int64_t{1} << 17;

// Runs the call on the team lstm_split_choose picks for its kind (Note [measured choice of the
// split]) and reports how long it took per step.
template <class F>
void timed_split_call(const SplitKind& kind, int64_t steps, const F& run) {
  const int parts = lstm_split_choose(kind);
  const auto start = std::chrono::steady_clock::now();
  run(parts);
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  lstm_split_record(kind, parts, ns / static_cast<double>(std::max<int64_t>(steps, 1)));
}

// Runs body(thread, threads) on a team of `team` threads, or on fewer if OpenMP gives fewer: then
// some thread runs more than one part (parts thread, thread + threads, ...) in each step.
template <class F>
void over_unit_parts(int team, const F& body) {
  if (team <= 1) {
    body(0, 1);
    return;
  }
#pragma omp parallel num_threads(team)
  body(omp_get_thread_num(), omp_get_num_threads());
}

// Note [the input rows first]: a step's chain runs over the input rows (x_t) and then the hidden
// rows (h_{t-1}), and only the second part waits for the step before. So each thread first runs the
// input part of every step's chains, panel by panel (a panel's input rows, 32 KiB at I = 32 and 64
// units, stay in L1 for all the steps), leaving each chain's accumulator in the gates; each step
// then carries its chains on over the hidden rows and adds the bias. The chains are the same, so
// are the bits, and a step streams 256 KiB of weights instead of 320 at I = 32, H = 128.
void forward_by_unit_panels(int parts, const ForwardUnitPanels& layout, const float* xs, int64_t input, float* z,
                            float* h, float* c, const float* h_init, const float* c_init, const int64_t* len,
                            int64_t steps, int64_t hidden, bool reverse) {
  const int64_t width = 4 * hidden;
  const float* b = layout.bias.defined() ? static_cast<const float*>(layout.bias.data_ptr()) : nullptr;
  StepBarrier barrier(parts);
  over_unit_parts(parts, [&](int thread, int threads) {
    // The input's part of every step's chains first (Note [the input rows first]).
    for (const UnitPanel& panel : layout.panels) {
      if (panel.part % threads != thread) continue;
      const float* w = static_cast<const float*>(panel.data.data_ptr());
      for (int64_t t = 0; t < steps; ++t)
        gemv_segmented_columns_avx512(input, xs + t * input, 0, xs, 4, panel.units, w, 4 * panel.units, panel.units,
                                      0.0f, z + t * width + panel.u0, hidden);
    }
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t t = reverse ? steps - 1 - s : s;
      const float* hp = s == 0 ? h_init : h + (reverse ? t + 1 : t - 1) * hidden;
      const float* cp = s == 0 ? c_init : c + (reverse ? t + 1 : t - 1) * hidden;
      float* zt = z + t * width;
      float* hn = h + t * hidden;
      float* cn = c + t * hidden;
      // The product reads h_prev one element a row, and each of its cache lines that another thread
      // wrote is a miss between cores (a round trip takes 290 ns on a 2-vCPU Xeon); met one at a
      // time, they stalled the weight stream in turn. Asked for together they arrive in about one
      // latency: there a split step's product alone went from 1.64-1.68 to 1.45-1.55 us, and
      // lstm_small:1 steps got 1.3-1.4% faster (in one process, twice).
      if (threads > 1)
        for (int64_t j = 0; j < hidden; j += 16) __builtin_prefetch(hp + j, 0, 3);
      for (int part = thread; part < parts; part += threads) {
        const UnitRange units = unit_range(hidden, parts, part);
        const int64_t u0 = units.begin, n = units.end - units.begin;
        if (!row_active(len, 0, t)) {
          std::copy_n(hp + u0, n, hn + u0);
          std::copy_n(cp + u0, n, cn + u0);
          for (int64_t gate = 0; gate < 4; ++gate) std::fill_n(zt + gate * hidden + u0, n, 0.0f);
          continue;
        }
        for (const UnitPanel& panel : layout.panels) {
          if (panel.part != part) continue;
          const float* w = static_cast<const float*>(panel.data.data_ptr()) + input * 4 * panel.units;
          gemv_segmented_columns_continue_avx512(hidden, hp, 4, panel.units, w, 4 * panel.units, panel.units,
                                                 b != nullptr ? b + panel.u0 : nullptr, zt + panel.u0, hidden);
        }
        forward_cell_f32(zt + u0, zt + hidden + u0, zt + 2 * hidden + u0, zt + 3 * hidden + u0, cp + u0, cn + u0,
                         hn + u0, n);
      }
      if (threads > 1) barrier.arrive_and_wait(thread, threads, s + 1);
    }
  });
}

// db: [4H] bias-gradient sums (each part adds its own columns) or null; g: the output gradient
// (strides gs0 between steps, gs2 between units) or null when it is zero.
void backward_by_unit_panels(int parts, const BackwardUnitPanels& layout, const float* a, const float* c,
                             const float* c_init, const float* g, int64_t gs0, int64_t gs2, float* dh, float* dc,
                             float* dz, double* db, const int64_t* len, int64_t steps, int64_t hidden, bool reverse,
                             std::atomic<int64_t>* progress = nullptr) {
  const int64_t width = 4 * hidden;
  StepBarrier barrier(parts);
  over_unit_parts(parts, [&](int thread, int threads) {
    for (int64_t s = steps - 1; s >= 0; --s) {
      const int64_t t = reverse ? steps - 1 - s : s;
      const float* cp = s == 0 ? c_init : c + (reverse ? t + 1 : t - 1) * hidden;
      const float* at = a + t * width;
      float* dzt = dz + t * width;
      for (int part = thread; part < parts; part += threads) {
        const UnitRange units = unit_range(hidden, parts, part);
        const int64_t u0 = units.begin, n = units.end - units.begin;
        if (g != nullptr)
          for (int64_t j = u0; j < u0 + n; ++j) dh[j] += g[t * gs0 + j * gs2];
        if (!row_active(len, 0, t)) {
          for (int64_t gate = 0; gate < 4; ++gate) std::fill_n(dzt + gate * hidden + u0, n, 0.0f);
        } else {
          backward_row_f32(at + u0, at + hidden + u0, at + 2 * hidden + u0, at + 3 * hidden + u0, cp + u0,
                           c + t * hidden + u0, dh + u0, dc + u0, dzt + u0, dzt + hidden + u0, dzt + 2 * hidden + u0,
                           dzt + 3 * hidden + u0, n);
        }
        if (db != nullptr)
          for (int64_t gate = 0; gate < 4; ++gate) add_row(db + gate * hidden + u0, dzt + gate * hidden + u0, n);
      }
      // Note [weight gradients beside the batch-1 recurrence]: this step's dgates are final.
      if (progress != nullptr) progress->store(steps - s, std::memory_order_release);
      if (threads > 1) barrier.arrive_and_wait(thread, threads, steps - s);
      // dh_prev += dgates W_hh for each part's units, from every gate gradient.
      for (const UnitPanel& panel : layout.panels) {
        if (panel.part % threads != thread) continue;
        gemv_columns_avx512(width, panel.units, 1.0f, static_cast<const float*>(panel.data.data_ptr()), panel.units,
                            dzt, 1.0f, dh + panel.u0);
      }
    }
  });
}

}  // namespace

bool lstm_forward_reads_panels(int64_t steps, int64_t batch, int64_t hidden, int64_t input) {
  const int team = recurrence_threads(steps, batch, hidden, input);
  return panels_pay((batch + team - 1) / team, 4 * hidden, input + hidden);
}

bool lstm_backward_reads_panels(int64_t steps, int64_t batch, int64_t hidden) {
  const int team = recurrence_threads(steps, batch, hidden, /*input=*/0);
  return panels_pay((batch + team - 1) / team, hidden, 4 * hidden);
}

void set_lstm_cell_in_registers(bool on) {
  cell_in_registers_on.store(on, std::memory_order_relaxed);
}

void set_lstm_weight_panels(bool on) {
  weight_panels_on.store(on, std::memory_order_relaxed);
}

bool lstm_batch1_path_applies(int64_t batch, DType dtype, bool bf16_products) {
  return batch == 1 && dtype == kFloat32 && !bf16_products && gemv_avx512_available();
}

int lstm_batch1_parts(int64_t steps, int64_t hidden, int64_t input) {
  const int threads = get_num_threads();
  const int64_t macs = steps * (input + hidden) * 4 * hidden;
  if (threads <= 1 || omp_in_parallel() || macs < kMinSplitMacs) return 1;
  return static_cast<int>(std::clamp<int64_t>(hidden / kMinUnitsPerThread, 1, threads));
}

// Note [batch-parallel recurrence]. Step s runs time t = reverse ? T-1-s : s. Each thread's rows of
// a step are one product [x_t, h_{t-1}] [W_ih^T; W_hh^T] onto the bias: the input projection costs
// no separate pass over [T, B, 4H], and the depth I + H keeps the kernel's tiles long.
// products = kBFloat16 (autocast, float tensors only): the weights are rounded and packed once for
// every step (Note [bf16 products] in sbgemm.cpp), each step's [x_t, h_{t-1}] as it is multiplied.
void lstm_recurrence_forward(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                             const Tensor& b_hh, const Tensor& h0, const Tensor& c0, const Tensor& gates,
                             const Tensor& h_all, const Tensor& c_all, const Tensor& lengths, bool reverse,
                             DType products) {
  const int64_t steps = gates.size(0), batch = gates.size(1), hidden = h0.size(1), input = x.size(2);
  if (steps == 0 || batch == 0) return;
  const int64_t* len = lengths_data(lengths);
  const int64_t state = batch * hidden, width = 4 * hidden, depth = input + hidden;
  const bool bf16 = products == kBFloat16;
  TG_CHECK(!bf16 || gates.dtype() == kFloat32, "lstm: bf16 products need float32 tensors, got ", gates.dtype());
  // w_t = [W_ih^T; W_hh^T] [I + H, 4H] and b_ih + b_hh, made once for every step (or kept from an
  // earlier call with the same weights: Note [kept weight layouts]).
  if (lstm_batch1_path_applies(batch, gates.dtype(), bf16)) {
    const SplitKind kind{hidden, input, false, lstm_batch1_parts(steps, hidden, input)};
    timed_split_call(kind, steps, [&](int parts) {
      forward_by_unit_panels(parts, *forward_unit_panels(w_ih, w_hh, b_ih, b_hh, parts),
                             static_cast<const float*>(x.data_ptr()), input, static_cast<float*>(gates.data_ptr()),
                             static_cast<float*>(h_all.data_ptr()), static_cast<float*>(c_all.data_ptr()),
                             static_cast<const float*>(h0.data_ptr()), static_cast<const float*>(c0.data_ptr()), len,
                             steps, hidden, reverse);
    });
    return;
  }
  const int team = recurrence_threads(steps, batch, hidden, input);
  const bool panels = !bf16 && gates.dtype() == kFloat32 && panels_pay((batch + team - 1) / team, width, depth);
  const std::shared_ptr<const ForwardWeights> layout = forward_weights(w_ih, w_hh, b_ih, b_hh, products, panels);
  const Tensor& bias = layout->bias;
  dispatch_floating(gates.dtype(), "lstm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xs = static_cast<const T*>(x.data_ptr());
    const T* w = panels ? nullptr : static_cast<const T*>(layout->w_t.data_ptr());
    const T* b = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
    T* z = static_cast<T*>(gates.data_ptr());
    T* h = static_cast<T*>(h_all.data_ptr());
    T* c = static_cast<T*>(c_all.data_ptr());
    const T* h_init = static_cast<const T*>(h0.data_ptr());
    const T* c_init = static_cast<const T*>(c0.data_ptr());
    over_batch_slices(team, batch, [&](int64_t b0, int64_t b1, int, int) {
      const int64_t rows = b1 - b0;
      thread_local std::vector<T> xh;  // this slice's [x_t, h_{t-1}]; kept, so steps allocate nothing
      xh.resize(static_cast<size_t>(rows * depth));
      T* xht = xh.data();
      const T *hp = h_init, *cp = c_init;
      for (int64_t s = 0; s < steps; ++s) {
        const int64_t t = reverse ? steps - 1 - s : s;
        T* zt = z + t * batch * width;
        for (int64_t r = 0; r < rows; ++r) {
          std::copy_n(xs + (t * batch + b0 + r) * input, input, xht + r * depth);
          std::copy_n(hp + (b0 + r) * hidden, hidden, xht + r * depth + input);
        }
        T* zs = zt + b0 * width;
        if (bf16) {  // the bias added as the product's tiles are written, here too
          if constexpr (std::is_same_v<T, float>)
            sbgemm(rows, 1.0f, xht, depth, 1, layout->w_t_bf16, 0.0f, zs, width, {}, b);
        } else if (panels) {  // the bits of the product below with w_t itself
          if constexpr (std::is_same_v<T, float>)
            sgemm_avx512_b_panels(rows, width, depth, 1.0f, xht, depth, 1,
                                  static_cast<const float*>(layout->w_t_panels.data_ptr()), 0.0f, zs, width, b);
        } else if (b != nullptr) {  // the bias added as the product's tiles are written: no pass of its own
          gemm_rows_bias(rows, width, depth, xht, depth, w, width, b, zs, width);
        } else {
          gemm_rows(rows, width, depth, xht, depth, w, width, T(0), zs, width);
        }
        forward_rows(zt, hp, cp, h + t * state, c + t * state, len, t, hidden, b0, b1);
        hp = h + t * state;
        cp = c + t * state;
      }
    });
  });
}

namespace {

// Note [weight gradients step by step]: after the backward recurrence, dW_ih and dW_hh are products
// over all T x B rows of dgates, and the kernel packs dgates^T for each. At lstm_small:256 dgates is
// 26 MB: written once, then read back from memory twice, which cost about a tenth of the step; and
// where the two threads do not share a last-level cache, each reads half of its columns' rows from
// the other thread's slices. So each thread instead adds dgates^T [x_t, h_prev(t)] of its own rows
// to a [4H, I + H] partial sum, while they are in cache (and dgates need not be kept at all when
// nothing else reads it); the partials are added in slice order at the end. A step of a short
// slice would make a thin product whose output is read and written every step (at 32 rows per
// thread, lstm_small:64, whole steps were 7% slower), so a thread gathers the rows of consecutive
// steps until it has kMinStepWeightRows of them (when dgates is not kept, each step's are written
// straight into the group: lstm_small:64 copied 64 KiB per thread and step); a partial that
// outgrows L2 (lstm_large's 6 MB made steps 15% slower) is not offered. Sums run in another order
// than the products over all rows, so the bits differ from theirs (within float rounding), and like
// the bias gradients they depend on the number of slices.
constexpr int64_t kMinStepWeightRows = 128;
constexpr int64_t kMaxStepWeightFloats = int64_t{1} << 17;  // a partial of 512 KiB: half of a Zen 5 L2
constexpr int64_t kMinStepWeightSliceRows = 8;

// The inputs and outputs of the step-by-step weight gradients (float only).
struct StepWeightGrads {
  const float* x;       // [T, B, I]
  const float* h_init;  // [B, H]
  const float* h_all;   // [T, B, H]
  float* dw_ih;         // [4H, I]
  float* dw_hh;         // [4H, H]
  int64_t input;
};

// Note [partial sums added by their threads]: each thread makes its slice's partial weight
// gradient in a buffer of its own (Note [weight gradients step by step]), which no other thread
// writes, then, once all are made, adds the partials for its share of the gate rows, in slice
// order, straight into dW_ih and dW_hh. Added by the calling thread alone after the team was done,
// they took 16-23 us of every lstm_row:64 and lstm_small:64 step while the other core waited, and
// the zeroed shared buffer they were made in was first written by the calling thread, so the other
// thread's first product pulled its half over from that core. The same sums in the same order, so
// the same bits.
void add_partials(float* const* partials, int parts, int64_t row0, int64_t row1, int64_t hidden,
                  const StepWeightGrads& weights) {
  const int64_t input = weights.input, depth = input + hidden;
  for (int64_t i = row0; i < row1; ++i) {
    float* out_ih = weights.dw_ih + i * input;
    float* out_hh = weights.dw_hh + i * hidden;
    std::copy_n(partials[0] + i * depth, input, out_ih);
    std::copy_n(partials[0] + i * depth + input, hidden, out_hh);
    for (int part = 1; part < parts; ++part) {
      add_row(out_ih, partials[part] + i * depth, input);
      add_row(out_hh, partials[part] + i * depth + input, hidden);
    }
  }
}

// Note [weight gradients beside the batch-1 recurrence]: at batch 1 the backward recurrence often
// runs on one thread (Note [measured choice of the split]: where cores pass data slowly the split by
// units does not pay) while the other core waits, and after it dW_ih and dW_hh were products over
// every step's gate gradients: 58 us of a 0.37 ms lstm_small:1 step on a 2-vCPU Xeon, half as long
// as the recurrence itself. So a second thread may make them while the recurrence runs, in chunks of
// steps in the order the recurrence finishes them (it publishes each step it finishes), each chunk's
// products added to dW_ih and dW_hh (the first chunk's written). Otherwise the same chunks run after
// the recurrence on the calling thread, so the bits do not depend on the way or the thread count;
// they differ from one product over all steps (the sums run in another order: within float
// rounding). Each chunk costs one pass over dW and the last is what is left when the recurrence
// ends, so the chunks are 2/5, 2/5 and 1/5 of the steps (lstm_small:1 in one process against the
// three products after the recurrence: chunks of 10 steps beside gave -9.4% on two threads and +2.8%
// on one, of 16 -7% and +1.5%, of 25 -5.1% and -0.7%, these -8.0/-8.4% and even).
// Beside is not faster everywhere: on a Zen 5 whose vCPUs share an L3 the recurrence itself slowed
// down as the other core read its fresh gate gradients, and the recurrence split by units then
// after won (docs/benchmarks.md, "The batch-1 weight gradients beside the recurrence: tried, not
// kept"). So each kind of call measures the two ways (Note [measured choice between one thread and a
// team]): beside (the team way) and after (the recurrence on its own measured team, then the
// chunks). On the Xeon beside is kept: steps 10.1-10.5% faster than after.

// Adds (first: writes) the chunk of times [ta, tb)'s part of dW_ih and dW_hh: dgates^T x and
// dgates^T h_prev, h_prev(t) = h_all at the time before (reverse: after), or h_init at the first.
void add_weight_chunk(const StepWeightGrads& w, const float* dz, int64_t ta, int64_t tb, int64_t steps, int64_t hidden,
                      bool reverse, bool first) {
  const int64_t width = 4 * hidden, input = w.input;
  const float beta0 = first ? 0.0f : 1.0f;
  sgemm_avx512(width, input, tb - ta, 1.0f, dz + ta * width, 1, width, w.x + ta * input, input, 1, beta0, w.dw_ih,
               input);
  const int64_t t_init = reverse ? steps - 1 : 0;  // the time whose h_prev is h_init
  const bool has_init = t_init >= ta && t_init < tb;
  const int64_t ra = has_init && !reverse ? ta + 1 : ta, rb = has_init && reverse ? tb - 1 : tb;
  float beta = beta0;
  if (rb > ra) {
    const float* h_prev = w.h_all + (reverse ? ra + 1 : ra - 1) * hidden;
    sgemm_avx512(width, hidden, rb - ra, 1.0f, dz + ra * width, 1, width, h_prev, hidden, 1, beta, w.dw_hh, hidden);
    beta = 1.0f;
  }
  if (has_init)
    sgemm_avx512(width, hidden, 1, 1.0f, dz + t_init * width, 1, width, w.h_init, hidden, 1, beta, w.dw_hh, hidden);
}

// The chunks, in the order the backward recurrence finishes their steps: two fifths of the steps,
// two fifths, then the last fifth, so that what is left when the recurrence ends is a small product
// (fewer, larger chunks cost one thread less: each adds one pass over dW). Chunk k's times [ta, tb),
// and how many steps must be finished before it can be added.
constexpr int kWeightChunks = 3;
std::atomic<int64_t> weight_chunks_beside{0};  // calls whose chunks a second thread added
struct WeightChunk {
  int64_t ta, tb, ready_after;
};
WeightChunk weight_chunk(int k, int64_t steps, bool reverse) {
  const auto finished = [&](int chunk) {  // steps finished at the end of the chunk before `chunk`
    return steps < 5 ? (chunk == 0 ? 0 : steps) : std::min<int64_t>(steps, chunk * 2 * steps / 5);
  };
  const int64_t p0 = finished(k), p1 = k + 1 == kWeightChunks ? steps : finished(k + 1);
  return reverse ? WeightChunk{p0, p1, p1} : WeightChunk{steps - p1, steps - p0, p1};
}

// The batch-1 backward recurrence and its weight gradients (Note [weight gradients beside the
// batch-1 recurrence]): beside it on a second thread, or after it on the calling thread, whichever
// this kind of call has measured faster (both give the same bits). recurrence(progress): the
// recurrence on one thread, publishing its finished steps to `progress` (null: nowhere);
// recurrence_alone(): the recurrence on the team its own measured choice picks. dz: every step's
// dgates (kept for the chunks).
template <class Recurrence, class RecurrenceAlone>
void batch1_backward_with_weights(const StepWeightGrads& w, const float* dz, int64_t steps, int64_t hidden,
                                  bool reverse, const Recurrence& recurrence, const RecurrenceAlone& recurrence_alone) {
  std::atomic<int64_t> progress{0};
  const auto add_chunks = [&](bool wait) {
    bool first = true;
    for (int k = 0; k < kWeightChunks; ++k) {
      const WeightChunk chunk = weight_chunk(k, steps, reverse);
      if (chunk.tb <= chunk.ta) continue;
      if (wait) wait_until_reached(progress, chunk.ready_after);
      add_weight_chunk(w, dz, chunk.ta, chunk.tb, steps, hidden, reverse, first);
      first = false;
    }
  };
  if (get_num_threads() < 2 || omp_in_parallel()) {
    recurrence(nullptr);
    add_chunks(false);
    return;
  }
  const SplitKind kind{hidden, w.input, true, 2, /*weights_beside=*/true};
  timed_split_call(kind, steps, [&](int parts) {
    if (parts == 1) {
      recurrence_alone();
      add_chunks(false);
      return;
    }
#pragma omp parallel num_threads(2)
    {
      if (omp_get_num_threads() < 2) {
        recurrence(nullptr);
        add_chunks(false);
      } else if (omp_get_thread_num() == 0) {
        recurrence(&progress);
      } else {
        add_chunks(true);
        weight_chunks_beside.fetch_add(1, std::memory_order_relaxed);
      }
    }
  });
}

void backward_recurrence(const Tensor& gates, const Tensor& w_hh, const Tensor& c0, const Tensor& c_all,
                         const Tensor& grad_h_all, const Tensor& grad_h_n, const Tensor& grad_c_n, const Tensor& dh,
                         const Tensor& dc, const Tensor& dgates, const Tensor& grad_b_ih, const Tensor& grad_b_hh,
                         const Tensor& lengths, bool reverse, DType products, const StepWeightGrads* weights) {
  const int64_t steps = gates.size(0), batch = gates.size(1), hidden = c0.size(1);
  for (const Tensor* grad_bias : {&grad_b_ih, &grad_b_hh})
    if (grad_bias->defined()) fill(*grad_bias, 0.0);
  // The running state gradients start as the last state's (undefined: zeros).
  if (dh.numel() > 0) {
    if (grad_h_n.defined())
      copy(grad_h_n, dh);
    else
      fill(dh, 0.0);
    if (grad_c_n.defined())
      copy(grad_c_n, dc);
    else
      fill(dc, 0.0);
  }
  if (steps == 0 || batch == 0) return;
  const int64_t* len = lengths_data(lengths);
  const int64_t state = batch * hidden, width = 4 * hidden;
  const bool bf16 = products == kBFloat16;
  TG_CHECK(!bf16 || gates.dtype() == kFloat32, "lstm: bf16 products need float32 tensors, got ", gates.dtype());
  const std::shared_ptr<const PackedBf16Matrix> w_hh_bf16 = bf16 ? backward_w_hh_bf16(w_hh) : nullptr;
  // Each step: [B, 4H] x [4H, H] (Note [recurrent weights laid out as panels]).
  const int team = recurrence_threads(steps, batch, hidden, /*input=*/0);
  const bool panels = !bf16 && gates.dtype() == kFloat32 && !lstm_batch1_path_applies(batch, gates.dtype(), bf16) &&
                      panels_pay((batch + team - 1) / team, hidden, width);
  const std::shared_ptr<const Tensor> w_hh_panels = panels ? backward_w_hh_panels(w_hh) : nullptr;
  // The incoming output gradient may be any view, or undefined (zeros) when the sequence is unused.
  const bool has_output_grad = grad_h_all.defined();
  const int64_t gs0 = has_output_grad ? grad_h_all.stride(0) : 0, gs1 = has_output_grad ? grad_h_all.stride(1) : 0,
                gs2 = has_output_grad ? grad_h_all.stride(2) : 0;
  dispatch_floating(gates.dtype(), "lstm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = static_cast<const T*>(gates.data_ptr());
    const T* w = static_cast<const T*>(w_hh.data_ptr());
    const T* c = static_cast<const T*>(c_all.data_ptr());
    const T* c_init = static_cast<const T*>(c0.data_ptr());
    const T* g = has_output_grad ? static_cast<const T*>(grad_h_all.data_ptr()) : nullptr;
    T* dhp = static_cast<T*>(dh.data_ptr());
    T* dcp = static_cast<T*>(dc.data_ptr());
    T* dz = dgates.defined() ? static_cast<T*>(dgates.data_ptr()) : nullptr;  // null: kept per thread, per step
    // Or a zero broadcast from one element.
    const bool output_grad_is_zero = g == nullptr || (gs0 == 0 && gs1 == 0 && gs2 == 0 && g[0] == T(0));
    const bool want_bias = grad_b_ih.defined() || grad_b_hh.defined();
    const auto write_bias_grads = [&](const double* sums) {
      for (const Tensor* grad_bias : {&grad_b_ih, &grad_b_hh}) {  // the same gradient for both
        if (!grad_bias->defined()) continue;
        T* out = static_cast<T*>(grad_bias->data_ptr());
        for (int64_t j = 0; j < width; ++j) out[j] = static_cast<T>(sums[j]);
      }
    };
    if constexpr (std::is_same_v<T, float>) {
      if (lstm_batch1_path_applies(batch, gates.dtype(), bf16)) {
        std::vector<double> db(want_bias ? static_cast<size_t>(width) : 0, 0.0);
        const auto recurrence_by_units = [&](int parts, float* dzs, std::atomic<int64_t>* progress) {
          backward_by_unit_panels(parts, *backward_unit_panels(w_hh, parts), a, c, c_init,
                                  output_grad_is_zero ? nullptr : g, gs0, gs2, dhp, dcp, dzs,
                                  want_bias ? db.data() : nullptr, len, steps, hidden, reverse, progress);
        };
        // On the team lstm_split_choose picks (Note [measured choice of the split]).
        const auto measured_recurrence = [&](float* dzs) {
          const SplitKind kind{hidden, 0, true, lstm_batch1_parts(steps, hidden, 0)};
          timed_split_call(kind, steps, [&](int parts) { recurrence_by_units(parts, dzs, nullptr); });
        };
        if (weights != nullptr) {                   // Note [weight gradients beside the batch-1 recurrence]
          thread_local std::vector<float> dz_kept;  // when dgates is not kept for dx
          if (dz == nullptr) dz_kept.resize(static_cast<size_t>(steps * width));
          float* dzs = dz != nullptr ? dz : dz_kept.data();
          batch1_backward_with_weights(
              *weights, dzs, steps, hidden, reverse,
              [&](std::atomic<int64_t>* progress) { recurrence_by_units(1, dzs, progress); },
              [&] { measured_recurrence(dzs); });
        } else {
          measured_recurrence(dz);
        }
        if (want_bias) write_bias_grads(db.data());
        return;
      }
    }
    // The bias gradient (the sum of dgates over steps and rows) as each slice's dgates are made,
    // while they are in cache: one partial per slice, added in slice order (the same sums for any
    // thread count with the same slices).
    // In double, like the library's other float sums (T * B terms each).
    std::vector<double> partial_db(want_bias ? static_cast<size_t>(team * width) : 0, 0.0);
    // Note [weight gradients step by step]: each slice's [4H, I + H] partial sum, in a buffer of its
    // thread's own (Note [partial sums added by their threads]).
    const int64_t depth = weights != nullptr ? weights->input + hidden : 0;
    std::vector<float*> partial_dw(static_cast<size_t>(team), nullptr);
    StepBarrier partials_done(team);
    over_batch_slices(team, batch, [&](int64_t b0, int64_t b1, int part, int parts) {
      double* db = partial_db.empty() ? nullptr : partial_db.data() + part * width;
      thread_local std::vector<float> partial;
      if (weights != nullptr) {
        partial.resize(static_cast<size_t>(width * depth));
        partial_dw[static_cast<size_t>(part)] = partial.data();
      }
      thread_local std::vector<T> dz_rows;  // the slice's dgates of a step when not kept
      if (dz == nullptr) dz_rows.resize(static_cast<size_t>((b1 - b0) * width));
      // Note [weight gradients step by step]: the slice's rows of the steps not yet in the partial,
      // their dgates and [x_t, h_prev] side by side, until there are enough for a product.
      thread_local std::vector<float> dz_group, xh_group;
      const int64_t rows = b1 - b0, group_steps = (kMinStepWeightRows + rows - 1) / rows;
      // A slice tall enough for a product of its own each step reads that step's dgates in place
      // (lstm_small:256: 256 KB per thread and step not copied).
      const bool dz_in_place = group_steps == 1;
      int64_t grouped = 0;  // rows in the group
      bool partial_started = false;
      if (weights != nullptr) {
        if (!dz_in_place) dz_group.resize(static_cast<size_t>(group_steps * rows * width));
        xh_group.resize(static_cast<size_t>(group_steps * rows * depth));
      }
      for (int64_t s = steps - 1; s >= 0; --s) {
        const int64_t t = reverse ? steps - 1 - s : s;
        const int64_t t_prev = reverse ? t + 1 : t - 1;
        const T* gt = output_grad_is_zero ? nullptr : g + t * gs0;
        if (output_grad_is_zero) {
          // nothing to add: the output sequence was unused (a classifier reading h_n)
        } else if (gs2 == 1) {
          for (int64_t b = b0; b < b1; ++b) add_row(dhp + b * hidden, gt + b * gs1, hidden);
        } else {
          for (int64_t b = b0; b < b1; ++b)
            for (int64_t j = 0; j < hidden; ++j) dhp[b * hidden + j] += gt[b * gs1 + j * gs2];
        }
        const T* cp = s == 0 ? c_init : c + t_prev * state;
        // This step's dgates of the slice's rows: kept in dgates, or else written straight into the
        // group of the weight gradients' next product (no copy), or into a buffer of the step's own.
        T* dzs = dz_rows.data();
        if (dz != nullptr) {
          dzs = dz + (t * batch + b0) * width;
        } else if constexpr (std::is_same_v<T, float>) {
          if (weights != nullptr && !dz_in_place) dzs = dz_group.data() + grouped * width;
        }
        backward_rows(a + t * batch * width, cp, c + t * state, dhp, dcp, dzs, len, t, hidden, b0, b1);
        if (db != nullptr)
          for (int64_t r = 0; r < rows; ++r) add_row(db, dzs + r * width, width);
        // dh_prev += dgates W_hh, this slice's rows only
        if constexpr (std::is_same_v<T, float>) {
          if (bf16) {
            sbgemm(rows, 1.0f, dzs, width, 1, *w_hh_bf16, 1.0f, dhp + b0 * hidden, hidden);
            continue;
          }
        }
        if constexpr (std::is_same_v<T, float>) {
          if (panels)  // the bits of the product below with W_hh itself
            sgemm_avx512_b_panels(rows, hidden, width, 1.0f, dzs, width, 1,
                                  static_cast<const float*>(w_hh_panels->data_ptr()), 1.0f, dhp + b0 * hidden, hidden);
        }
        if (!panels) gemm_rows(rows, hidden, width, dzs, width, w, hidden, T(1), dhp + b0 * hidden, hidden);
        if constexpr (std::is_same_v<T, float>) {
          if (weights != nullptr) {  // partial += dgates^T [x_t, h_prev(t)] over the group's rows
            const int64_t input = weights->input;
            const float* h_prev = s == 0 ? weights->h_init : weights->h_all + t_prev * state;
            if (!dz_in_place && dz != nullptr) std::copy_n(dzs, rows * width, dz_group.data() + grouped * width);
            for (int64_t r = 0; r < rows; ++r) {
              float* xh = xh_group.data() + (grouped + r) * depth;
              std::copy_n(weights->x + (t * batch + b0 + r) * input, input, xh);
              std::copy_n(h_prev + (b0 + r) * hidden, hidden, xh + input);
            }
            grouped += rows;
            if (grouped >= group_steps * rows || s == 0) {
              sgemm_avx512(width, depth, grouped, 1.0f, dz_in_place ? dzs : dz_group.data(), 1, width, xh_group.data(),
                           depth, 1, partial_started ? 1.0f : 0.0f, partial.data(), depth);
              partial_started = true;
              grouped = 0;
            }
          }
        }
      }
      if constexpr (std::is_same_v<T, float>) {
        if (weights != nullptr) {  // Note [partial sums added by their threads]
          if (parts > 1) partials_done.arrive_and_wait(part, parts, 1);
          add_partials(partial_dw.data(), parts, width * part / parts, width * (part + 1) / parts, hidden, *weights);
        }
      }
    });
    if (want_bias) {
      for (int part = 1; part < team; ++part) add_row(partial_db.data(), partial_db.data() + part * width, width);
      write_bias_grads(partial_db.data());
    }
  });
}

}  // namespace

int64_t lstm_batch1_weight_calls_beside() {
  return weight_chunks_beside.load(std::memory_order_relaxed);
}

bool lstm_weight_grads_by_step(int64_t steps, int64_t batch, int64_t hidden, int64_t input, DType dtype) {
  if (dtype != kFloat32 || steps == 0 || !sgemm_avx512_available()) return false;
  // Note [weight gradients beside the batch-1 recurrence]
  if (lstm_batch1_path_applies(batch, dtype, false)) return true;
  const int team = recurrence_threads(steps, batch, hidden, /*input=*/0);
  return batch / team >= kMinStepWeightSliceRows && 4 * hidden * (input + hidden) <= kMaxStepWeightFloats;
}

void lstm_recurrence_backward(const Tensor& gates, const Tensor& w_hh, const Tensor& c0, const Tensor& c_all,
                              const Tensor& grad_h_all, const Tensor& grad_h_n, const Tensor& grad_c_n,
                              const Tensor& dh, const Tensor& dc, const Tensor& dgates, const Tensor& grad_b_ih,
                              const Tensor& grad_b_hh, const Tensor& lengths, bool reverse, DType products) {
  backward_recurrence(gates, w_hh, c0, c_all, grad_h_all, grad_h_n, grad_c_n, dh, dc, dgates, grad_b_ih, grad_b_hh,
                      lengths, reverse, products, nullptr);
}

void lstm_recurrence_backward_weights(const Tensor& gates, const Tensor& w_hh, const Tensor& x, const Tensor& h0,
                                      const Tensor& h_all, const Tensor& c0, const Tensor& c_all,
                                      const Tensor& grad_h_all, const Tensor& grad_h_n, const Tensor& grad_c_n,
                                      const Tensor& dh, const Tensor& dc, const Tensor& dgates, const Tensor& grad_b_ih,
                                      const Tensor& grad_b_hh, const Tensor& grad_w_ih, const Tensor& grad_w_hh,
                                      const Tensor& lengths, bool reverse, bool* done) {
  const int64_t input = x.size(2);
  *done = lstm_weight_grads_by_step(gates.size(0), gates.size(1), c0.size(1), input, gates.dtype());
  if (!*done) return;
  const StepWeightGrads weights{static_cast<const float*>(x.data_ptr()),     static_cast<const float*>(h0.data_ptr()),
                                static_cast<const float*>(h_all.data_ptr()), static_cast<float*>(grad_w_ih.data_ptr()),
                                static_cast<float*>(grad_w_hh.data_ptr()),   input};
  backward_recurrence(gates, w_hh, c0, c_all, grad_h_all, grad_h_n, grad_c_n, dh, dc, dgates, grad_b_ih, grad_b_hh,
                      lengths, reverse, kFloat32, &weights);
}

void register_lstm(backend::KernelTable& t) {
  t.lstm_recurrence_forward = lstm_recurrence_forward;
  t.lstm_recurrence_backward = lstm_recurrence_backward;
  t.lstm_recurrence_backward_weights = lstm_recurrence_backward_weights;
}

}  // namespace tapegrad::cpu
