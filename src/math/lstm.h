// The LSTM cell's pointwise forward and backward (gate order i, f, g, o, as PyTorch and cuDNN),
// host+device. Pre-activations z = x W_ih^T + b_ih + h W_hh^T + b_hh, then
//   i = s(z_i), f = s(z_f), g = tanh(z_g), o = s(z_o), c' = f c + i g, h' = o tanh(c').
#pragma once

#include <cmath>

#include "math/host_device.h"

namespace tapegrad::math {

template <class T>
TG_HD T sigmoid(T x) {
  return T(1) / (T(1) + exp(-x));
}

// Where the cell's sigmoid and tanh come from: the math library by default (CUDA's intrinsics on the
// device). A backend may pass its own policy with the same two members, e.g. the CPU's vectorisable
// float versions (src/cpu/loops/vec_math.h), and still share the formulas below.
struct LibmActivations {
  template <class T>
  TG_HD static T sigmoid_of(T x) {
    return sigmoid(x);
  }
  template <class T>
  TG_HD static T tanh_of(T x) {
    return tanh(x);
  }
};

// The forward in two halves, for a backend that runs each as its own pass over a row (Note [the
// cell in two passes] in src/cpu/kernels/lstm.cpp): activates the four gates in place and returns
// the new cell value ...
template <class T, class Act = LibmActivations>
TG_HD T lstm_cell_gates(T& zi, T& zf, T& zg, T& zo, T c_prev) {
  zi = Act::sigmoid_of(zi);
  zf = Act::sigmoid_of(zf);
  zg = Act::tanh_of(zg);
  zo = Act::sigmoid_of(zo);
  return zf * c_prev + zi * zg;
}

// ... and from it and the activated output gate, the new hidden value.
template <class T, class Act = LibmActivations>
TG_HD T lstm_cell_hidden(T o, T c_new) {
  return o * Act::tanh_of(c_new);
}

// Activates the four gates in place and returns the new cell and hidden values.
template <class T, class Act = LibmActivations>
TG_HD void lstm_cell_forward(T& zi, T& zf, T& zg, T& zo, T c_prev, T* c_new, T* h_new) {
  const T c = lstm_cell_gates<T, Act>(zi, zf, zg, zo, c_prev);
  *c_new = c;
  *h_new = lstm_cell_hidden<T, Act>(zo, c);
}

// Given activated gates, c_prev, c_new, and the gradients dh (of h_new) and dc (of c_new, from the
// next step), writes the pre-activation gradients and returns dc for c_prev through *dc.
template <class T, class Act = LibmActivations>
TG_HD void lstm_cell_backward(T i, T f, T g, T o, T c_prev, T c_new, T dh, T* dc, T* dzi, T* dzf, T* dzg, T* dzo) {
  T tanh_c = Act::tanh_of(c_new);
  T dc_total = *dc + dh * o * (T(1) - tanh_c * tanh_c);
  *dzo = dh * tanh_c * o * (T(1) - o);
  *dzi = dc_total * g * i * (T(1) - i);
  *dzf = dc_total * c_prev * f * (T(1) - f);
  *dzg = dc_total * i * (T(1) - g * g);
  *dc = dc_total * f;
}

}  // namespace tapegrad::math
