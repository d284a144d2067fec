# Writes vmlinux.h (the kernel's types, for CO-RE BPF programs) from a BTF file:
#   cmake -DBPFTOOL=... -DBTF_FILE=... -DOUTPUT=... -P vmlinux_h.cmake
# A script rather than a shell line so that a missing BTF file fails with the reason and the way
# out, not with bpftool's bare "No such file or directory".
if(NOT EXISTS "${BTF_FILE}")
  message(FATAL_ERROR
    "${BTF_FILE} does not exist, and eacgm's BPF programs are compiled against the kernel's BTF.\n"
    "Use a kernel built with CONFIG_DEBUG_INFO_BTF=y, or configure with "
    "-DEACGM_BTF_FILE=<path to a BTF file> (e.g. one from btfhub for this kernel).")
endif()
execute_process(
  COMMAND "${BPFTOOL}" btf dump file "${BTF_FILE}" format c
  OUTPUT_FILE "${OUTPUT}.tmp"
  RESULT_VARIABLE status
  ERROR_VARIABLE error)
if(NOT status EQUAL 0)
  file(REMOVE "${OUTPUT}.tmp")
  message(FATAL_ERROR "bpftool could not read ${BTF_FILE}: ${error}")
endif()
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
