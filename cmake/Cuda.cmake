# Decides whether the CUDA backend is built. AUTO builds it when a CUDA compiler is found; OFF never
# looks for one, so a machine without any toolkit configures cleanly. EMULATE compiles the same
# cuda/ sources with the host compiler against tests/cuda_emulator (no toolkit needed): a test
# build in which every CUDA test runs on the CPU, never a library to ship.
set(TAPEGRAD_HAS_CUDA OFF)
set(TAPEGRAD_CUDA_EMULATION OFF)
if(TAPEGRAD_CUDA STREQUAL "EMULATE")
  set(TAPEGRAD_HAS_CUDA ON)
  set(TAPEGRAD_CUDA_EMULATION ON)
  message(STATUS "tapegrad: CUDA backend built against the CUDA emulator (a test build; cuDNN is not emulated)")
elseif(NOT TAPEGRAD_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)  # H100/H200; one architecture keeps the CI compile short
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(TAPEGRAD_HAS_CUDA ON)
  elseif(TAPEGRAD_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TAPEGRAD_CUDA=ON but no CUDA compiler was found")
  else()
    message(STATUS "tapegrad: no CUDA compiler found, building the CPU backend only")
  endif()
endif()
