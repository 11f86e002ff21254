# System dependencies of the CPU library: OpenMP and the OpenMP build of OpenBLAS, so that our
# parallel loops and OpenBLAS's GEMMs share one thread pool (libgomp) instead of oversubscribing.
find_package(OpenMP REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(ZLIB REQUIRED)  # gzip-compressed IDX datasets
find_package(nlohmann_json 3 REQUIRED)  # safetensors headers (header-only, build time only)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
add_library(tapegrad_openblas INTERFACE)
target_link_libraries(tapegrad_openblas INTERFACE PkgConfig::OPENBLAS)
