# Decides whether tapegrad::distributed talks to other processes: MPI for CPU tensors (launch,
# bootstrap and collectives) and, in a CUDA build, NCCL for CUDA tensors (bootstrapped over MPI).
# TAPEGRAD_DISTRIBUTED=AUTO builds MPI support when an MPI is found, ON requires it, OFF never looks.
# Without MPI the distributed API is still there: DistributedSampler works, and creating a process
# group throws a clear tapegrad::Error. Included after the tapegrad target exists.
set(TAPEGRAD_DISTRIBUTED AUTO CACHE STRING "Build MPI (and, with CUDA, NCCL) support: AUTO (when MPI is found), ON, OFF")
set_property(CACHE TAPEGRAD_DISTRIBUTED PROPERTY STRINGS AUTO ON OFF)

set(TAPEGRAD_HAS_MPI OFF)
set(TAPEGRAD_HAS_NCCL OFF)
if(NOT TAPEGRAD_DISTRIBUTED STREQUAL "OFF")
  set(MPI_CXX_SKIP_MPICXX ON)  # the C API only; no deprecated C++ bindings
  find_package(MPI COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(TAPEGRAD_HAS_MPI ON)
  elseif(TAPEGRAD_DISTRIBUTED STREQUAL "ON")
    message(FATAL_ERROR "TAPEGRAD_DISTRIBUTED=ON but no MPI was found (Debian: apt-get install libopenmpi-dev openmpi-bin)")
  else()
    message(STATUS "tapegrad: no MPI found, building without multi-process support")
  endif()
endif()

if(TAPEGRAD_HAS_MPI)
  file(GLOB TAPEGRAD_MPI_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/distributed/mpi/*.cpp)
  target_sources(tapegrad PRIVATE ${TAPEGRAD_MPI_SOURCES})
  target_link_libraries(tapegrad PRIVATE MPI::MPI_CXX)
  target_compile_definitions(tapegrad PRIVATE TAPEGRAD_WITH_MPI=1)
  # NCCL ships with the CUDA toolkit (beside cuBLAS); an emulated CUDA build has none.
  if(TAPEGRAD_HAS_CUDA AND NOT TAPEGRAD_CUDA_EMULATION)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(TAPEGRAD_HAS_NCCL ON)
      file(GLOB TAPEGRAD_NCCL_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cuda/distributed/*.cpp)
      target_sources(tapegrad PRIVATE ${TAPEGRAD_NCCL_SOURCES})
      target_include_directories(tapegrad PRIVATE ${NCCL_INCLUDE_DIR})
      target_link_libraries(tapegrad PRIVATE ${NCCL_LIBRARY})
      message(STATUS "tapegrad: NCCL at ${NCCL_LIBRARY}")
    else()
      message(STATUS "tapegrad: no NCCL found (set NCCL_ROOT): CUDA tensors cannot be communicated")
    endif()
  endif()
else()
  target_sources(tapegrad PRIVATE ${PROJECT_SOURCE_DIR}/src/distributed/no_mpi/no_mpi.cpp)
endif()
if(NOT TAPEGRAD_HAS_NCCL)
  target_sources(tapegrad PRIVATE ${PROJECT_SOURCE_DIR}/src/distributed/no_nccl/no_nccl.cpp)
endif()
message(STATUS "tapegrad: distributed: MPI ${TAPEGRAD_HAS_MPI}, NCCL ${TAPEGRAD_HAS_NCCL}")
