# `cmake --install build --prefix P` installs the public headers, the shared library (versioned
# through its soname), a CMake package (find_package(tapegrad CONFIG) -> tapegrad::tapegrad) and a
# pkg-config file. The library's own dependencies (OpenBLAS, OpenMP, zlib, CUDA) are linked
# privately into the shared object, so a consumer needs none of them at build time; the package
# config finds Threads, which the public headers use through <thread>.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

find_package(Threads REQUIRED)
target_link_libraries(tapegrad PUBLIC Threads::Threads)

install(TARGETS tapegrad EXPORT tapegradTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/tapegrad DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

set(TAPEGRAD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tapegrad)
install(EXPORT tapegradTargets NAMESPACE tapegrad:: DESTINATION ${TAPEGRAD_CMAKE_DIR})
# The build tree is a package too: -Dtapegrad_DIR=<build> finds the library where it was built,
# with no install step (tapegradConfig.cmake below includes this file from beside itself).
export(EXPORT tapegradTargets NAMESPACE tapegrad:: FILE ${PROJECT_BINARY_DIR}/tapegradTargets.cmake)
configure_package_config_file(cmake/tapegradConfig.cmake.in ${PROJECT_BINARY_DIR}/tapegradConfig.cmake
  INSTALL_DESTINATION ${TAPEGRAD_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tapegradConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tapegradConfig.cmake ${PROJECT_BINARY_DIR}/tapegradConfigVersion.cmake
  DESTINATION ${TAPEGRAD_CMAKE_DIR})

# The .pc file locates the prefix relative to itself, so it stays right for any --prefix.
file(RELATIVE_PATH TAPEGRAD_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/tapegrad.pc.in ${PROJECT_BINARY_DIR}/tapegrad.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tapegrad.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
