# TAPEGRAD_SANITIZE=address,undefined (or thread) builds the library, tests and examples with those
# sanitizers; any report aborts the program, so a ctest run fails on it. C++ sources only: nvcc
# has no sanitizers (compute-sanitizer covers the CUDA side on a GPU machine).
# TAPEGRAD_FUZZ=ON (clang only) builds the libFuzzer targets in tests/fuzz with AddressSanitizer
# and UndefinedBehaviorSanitizer; the library itself gets -fsanitize=fuzzer-no-link coverage.
set(TAPEGRAD_SANITIZE "" CACHE STRING "Sanitizers for C++ code: address,undefined or thread (empty: none)")
option(TAPEGRAD_FUZZ "Build the libFuzzer targets (needs clang)" OFF)

# Reports need file:line in their stacks: a build type without debug info gets line tables (-g1),
# which cost a fraction of full -g to compile. The CI scripts build RelWithDebInfo at -O1 -g1.
set(tapegrad_sanitize_flags "")
set(tapegrad_sanitize_debug_info "")
if(NOT CMAKE_BUILD_TYPE MATCHES "^(Debug|RelWithDebInfo)$")
  set(tapegrad_sanitize_debug_info -g1)
endif()
if(TAPEGRAD_SANITIZE)
  if(TAPEGRAD_SANITIZE MATCHES "thread" AND TAPEGRAD_SANITIZE MATCHES "address")
    message(FATAL_ERROR "TAPEGRAD_SANITIZE: thread cannot be combined with address")
  endif()
  list(APPEND tapegrad_sanitize_flags -fsanitize=${TAPEGRAD_SANITIZE} -fno-omit-frame-pointer
       ${tapegrad_sanitize_debug_info})
  if(TAPEGRAD_SANITIZE MATCHES "undefined")
    list(APPEND tapegrad_sanitize_flags -fno-sanitize-recover=all)
  endif()
endif()
if(TAPEGRAD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TAPEGRAD_FUZZ needs clang (configure with -DCMAKE_CXX_COMPILER=clang++)")
  endif()
  list(APPEND tapegrad_sanitize_flags -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
       -fno-omit-frame-pointer ${tapegrad_sanitize_debug_info})
endif()
if(tapegrad_sanitize_flags)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${tapegrad_sanitize_flags}>")
  add_link_options("$<$<LINK_LANGUAGE:CXX>:${tapegrad_sanitize_flags}>")
  message(STATUS "tapegrad: sanitizer flags ${tapegrad_sanitize_flags}")
  # The sanitizers' per-check records make the instrumented library carry about two million
  # relative relocations, applied at every process start: each of the ~1300 test cases is a
  # process of its own. Packed (DT_RELR, glibc 2.36 and binutils 2.38 or later), a test process
  # starts with about a tenth less CPU time and 45 MB less memory. Sanitizer builds only: a packed
  # library does not load on an older glibc.
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-Wl,-z,pack-relative-relocs" tapegrad_linker_packs_relocs)
  if(tapegrad_linker_packs_relocs)
    add_link_options("$<$<LINK_LANGUAGE:CXX>:-Wl,-z,pack-relative-relocs>")
  endif()
endif()
