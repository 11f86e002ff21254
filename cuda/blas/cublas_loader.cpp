// Note [cuBLAS on first use] (cublas_loader.h).
#include "blas/cublas_loader.h"

#include <atomic>
#include <string>

#include "tapegrad/core/error.h"

#ifndef TAPEGRAD_CUDA_EMULATED
#include <dlfcn.h>
#endif

namespace tapegrad::cuda_backend {

namespace {

std::atomic<bool> g_loaded{false};

#define TG_STRINGIFY_EXPANDED(name) TG_STRINGIFY(name)
#define TG_STRINGIFY(name) #name

#ifdef TAPEGRAD_CUDA_EMULATED

CublasApi load() {
  CublasApi api;
#define TG_CUBLAS_TAKE(member, function) api.member = &function;
  TG_CUBLAS_FUNCTIONS(TG_CUBLAS_TAKE)
  TG_CUBLASLT_FUNCTIONS(TG_CUBLAS_TAKE)
#undef TG_CUBLAS_TAKE
  return api;
}

#else

// The library by its soname, else the file the build linked against.
void* open_library(const char* stem, const char* configured_path) {
  const std::string soname = std::string(stem) + ".so." + std::to_string(CUBLAS_VER_MAJOR);
  if (void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string first_error = dlerror();
  if (void* handle = dlopen(configured_path, RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string second_error = dlerror();
  detail::throw_error(detail::str_cat("cuda: cannot load ", soname, ", which the CUDA backend's matrix products need (",
                                      first_error, "; ", second_error,
                                      "). Put the CUDA toolkit's library directory on LD_LIBRARY_PATH."));
}

template <class F>
void resolve(void* library, const char* soname, const char* symbol, F& out) {
  out = reinterpret_cast<F>(dlsym(library, symbol));
  if (out == nullptr)
    detail::throw_error(detail::str_cat("cuda: ", soname, " has no ", symbol, " (a cuBLAS older than the headers ",
                                        "tapegrad was built with, ", CUBLAS_VER_MAJOR, ".", CUBLAS_VER_MINOR, "?)"));
}

CublasApi load() {
  // cuBLASLt first: cuBLAS itself depends on it.
  void* lt = open_library("libcublasLt", TAPEGRAD_CUBLASLT_PATH);
  void* blas = open_library("libcublas", TAPEGRAD_CUBLAS_PATH);
  CublasApi api;
#define TG_CUBLAS_RESOLVE(member, function) resolve(blas, "libcublas", TG_STRINGIFY_EXPANDED(function), api.member);
#define TG_CUBLASLT_RESOLVE(member, function) resolve(lt, "libcublasLt", TG_STRINGIFY_EXPANDED(function), api.member);
  TG_CUBLAS_FUNCTIONS(TG_CUBLAS_RESOLVE)
  TG_CUBLASLT_FUNCTIONS(TG_CUBLASLT_RESOLVE)
#undef TG_CUBLAS_RESOLVE
#undef TG_CUBLASLT_RESOLVE
  return api;
}

#endif

}  // namespace

const CublasApi& cublas_api() {
  static const CublasApi api = [] {
    CublasApi loaded = load();
    g_loaded.store(true);
    return loaded;
  }();
  return api;
}

bool cublas_loaded() {
  return g_loaded.load();
}

}  // namespace tapegrad::cuda_backend
