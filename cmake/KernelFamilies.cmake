# The kernel families are found, not listed. A backend's registration calls one
# `register_<family>(backend::KernelTable&)` per family; rather than a hand-kept list of those calls
# (and of their declarations) that every new family had to edit, the build reads the backend's
# sources and writes the list: every definition that starts a line as
#
#   void register_<family>(backend::KernelTable& <name>) {
#
# becomes one `TG_KERNEL_FAMILY(<family>)` line of <build>/generated/<backend>_kernel_families.inc,
# in name order. The registration header declares them from it and the backend's registration calls
# them from it (src/cpu/cpu_backend.cpp, cuda/cuda_backend.cpp). A new family is then a new file
# alone. The list is rewritten at build time when a scanned source changes, and only touched when
# its content changes, so editing a kernel does not recompile the registration.
#
#   tapegrad_kernel_families(<backend> SOURCES <files...> [EXCLUDE <families...>])
#
# EXCLUDE names families the registration calls itself, in a set place (the CPU's 16-bit widening
# layer, which wraps what the others registered, runs last).
set(TAPEGRAD_KERNEL_FAMILIES_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/scan_kernel_families.cmake)

function(tapegrad_kernel_families backend)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;EXCLUDE")
  set(dir ${PROJECT_BINARY_DIR}/generated)
  set(out ${dir}/${backend}_kernel_families.inc)
  set(source_list ${dir}/${backend}_kernel_family_sources.txt)
  list(JOIN arg_SOURCES "\n" lines)
  file(CONFIGURE OUTPUT ${source_list} CONTENT "${lines}\n")
  list(JOIN arg_EXCLUDE "," exclude)
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DSOURCE_LIST=${source_list} -DOUT=${out} -DEXCLUDE=${exclude}
            -P ${TAPEGRAD_KERNEL_FAMILIES_SCRIPT}
    DEPENDS ${arg_SOURCES} ${source_list} ${TAPEGRAD_KERNEL_FAMILIES_SCRIPT}
    COMMENT "Listing the ${backend} kernel families" VERBATIM)
  target_sources(tapegrad PRIVATE ${out})
  target_include_directories(tapegrad PRIVATE ${dir})
endfunction()
