# Builds a BPF program (bpf/<name>.bpf.c, or SOURCE) into a CO-RE object and a libbpf skeleton header
# (<name>.skel.h) with clang and bpftool, against a vmlinux.h generated from
# the running kernel's BTF.

find_program(BPF_CLANG NAMES clang-14 clang REQUIRED)
find_program(BPFTOOL NAMES bpftool REQUIRED)
find_program(LLVM_STRIP NAMES llvm-strip-14 llvm-strip REQUIRED)

set(EACGM_BTF_FILE "/sys/kernel/btf/vmlinux" CACHE FILEPATH "Kernel BTF used to generate vmlinux.h")
set(EACGM_BPF_OUT_DIR ${CMAKE_BINARY_DIR}/bpf)
file(MAKE_DIRECTORY ${EACGM_BPF_OUT_DIR})

# Only the BPF objects need the BTF, and they are generated at build time: a machine without it
# still configures and builds everything else (the unit tests among them); building eacgm itself
# there stops at this step with the reason (cmake/vmlinux_h.cmake).
if(NOT EXISTS ${EACGM_BTF_FILE})
  message(WARNING
    "${EACGM_BTF_FILE} does not exist: the BPF programs, and so eacgm itself, cannot be built "
    "here. The unit tests can (--target eacgm_unit_tests). Use a kernel built with "
    "CONFIG_DEBUG_INFO_BTF=y, or pass -DEACGM_BTF_FILE=<path to a BTF file>.")
endif()

set(EACGM_VMLINUX_H ${EACGM_BPF_OUT_DIR}/vmlinux.h)
add_custom_command(
  OUTPUT ${EACGM_VMLINUX_H}
  COMMAND ${CMAKE_COMMAND} -DBPFTOOL=${BPFTOOL} -DBTF_FILE=${EACGM_BTF_FILE}
          -DOUTPUT=${EACGM_VMLINUX_H} -P ${CMAKE_CURRENT_LIST_DIR}/vmlinux_h.cmake
  DEPENDS ${CMAKE_CURRENT_LIST_DIR}/vmlinux_h.cmake
  COMMENT "Generating vmlinux.h from ${EACGM_BTF_FILE}"
  VERBATIM)

set(EACGM_BPF_SKELETONS "")
# eacgm_bpf_skeleton(NAME [SOURCE file.bpf.c]): SOURCE defaults to bpf/NAME.bpf.c.
function(eacgm_bpf_skeleton name)
  cmake_parse_arguments(ARG "" "SOURCE" "" ${ARGN})
  set(src ${CMAKE_SOURCE_DIR}/bpf/${name}.bpf.c)
  if(ARG_SOURCE)
    set(src ${ARG_SOURCE})
  endif()
  set(obj ${EACGM_BPF_OUT_DIR}/${name}.bpf.o)
  set(skel ${EACGM_BPF_OUT_DIR}/${name}.skel.h)
  file(GLOB bpf_headers ${CMAKE_SOURCE_DIR}/bpf/*.h ${CMAKE_SOURCE_DIR}/src/layers/*/*.bpf.h)
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${BPF_CLANG} -g -O2 -target bpf -D__TARGET_ARCH_x86 -Wall -Werror
            -I${EACGM_BPF_OUT_DIR} -I${CMAKE_SOURCE_DIR} -I${CMAKE_SOURCE_DIR}/src
            -idirafter /usr/include/x86_64-linux-gnu
            -c ${src} -o ${obj}
    COMMAND ${LLVM_STRIP} -g ${obj}
    DEPENDS ${src} ${bpf_headers} ${EACGM_VMLINUX_H}
    COMMENT "Compiling BPF program ${name}"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL} gen skeleton ${obj} name eacgm_${name} > ${skel}.tmp
    COMMAND ${CMAKE_COMMAND} -E rename ${skel}.tmp ${skel}
    DEPENDS ${obj}
    COMMENT "Generating BPF skeleton ${name}.skel.h"
    VERBATIM)
  list(APPEND EACGM_BPF_SKELETONS ${skel})
  set(EACGM_BPF_SKELETONS ${EACGM_BPF_SKELETONS} PARENT_SCOPE)
endfunction()
