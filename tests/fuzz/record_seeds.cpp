// Writes the record fuzzer's seeds into the directory given: one well-formed record of every
// kind the BPF programs send, and a short Python session (code objects, then samples through
// them) as the profile sees one. The fuzzer mutates from there, so it reaches each decoder and
// the profile's paths at once instead of first guessing sizes and kinds.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <vector>

#include "bpf/events.h"
#include "record_framing.h"

namespace {

template <typename T>
std::span<const std::byte> bytes(const T& record) {
  return std::as_bytes(std::span(&record, 1));
}

template <typename T>
T with_header(uint32_t kind, uint32_t layer) {
  T record{};
  record.hdr = {kind, 4242, 4242, layer, 1'000'000'000};
  return record;
}

void write(const std::filesystem::path& path, const std::vector<uint8_t>& data) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

template <typename T>
void write_one(const std::filesystem::path& dir, const char* name, const T& record) {
  std::vector<uint8_t> data;
  eacgm::fuzz::append_record(data, bytes(record));
  write(dir / name, data);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SEED_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  for (uint32_t layer :
       {EACGM_LAYER_CUDA, EACGM_LAYER_NCCL, EACGM_LAYER_TORCH, EACGM_LAYER_DRIVER}) {
    auto call = with_header<eacgm_call>(EACGM_EV_CALL, layer);
    write_one(dir, ("call-" + std::to_string(layer)).c_str(), call);
    call.hdr.kind = EACGM_EV_CALL_BEGIN;
    write_one(dir, ("call-begin-" + std::to_string(layer)).c_str(), call);
  }
  for (uint32_t kind : {EACGM_EV_PROC_FORK, EACGM_EV_PROC_EXEC, EACGM_EV_PROC_EXIT,
                        EACGM_EV_DL_STOP, EACGM_EV_DL_NOTICE}) {
    write_one(dir, ("proc-" + std::to_string(kind)).c_str(), with_header<eacgm_proc>(kind, 0));
  }
  // A kernel's name: the driver table's cuModuleGetFunction is row 79 (layers/driver/probes.cpp;
  // checked by DriverTable.NamingRowsTellBpfWhereTheNameAndHandleAre); the fuzzer's mutations find
  // the other rows.
  auto name = with_header<eacgm_name>(EACGM_EV_NAME, EACGM_LAYER_DRIVER);
  name.func_id = 79;
  std::strcpy(name.name, "_Z6vecAddPfS_S_i");
  write_one(dir, "name", name);
  auto unwind = with_header<eacgm_unwind_stop>(EACGM_EV_UNWIND_STOP, EACGM_LAYER_TORCH);
  write_one(dir, "unwind-stop", unwind);
  write_one(dir, "signal", with_header<eacgm_signal>(EACGM_EV_SIGNAL, EACGM_LAYER_OS));
  write_one(dir, "oom", with_header<eacgm_oom>(EACGM_EV_OOM_KILL, EACGM_LAYER_OS));
  write_one(dir, "mmap", with_header<eacgm_mmap>(EACGM_EV_MMAP, EACGM_LAYER_OS));
  write_one(dir, "ioctl", with_header<eacgm_ioctl>(EACGM_EV_IOCTL, EACGM_LAYER_OS));
  write_one(dir, "py-gc", with_header<eacgm_py_gc>(EACGM_EV_PY_GC, EACGM_LAYER_PYTHON));
  write_one(dir, "py-function",
            with_header<eacgm_py_function>(EACGM_EV_PY_FUNCTION, EACGM_LAYER_PYTHON));

  // A Python session: three functions described, then a second of samples through them.
  std::vector<uint8_t> session;
  const char* names[] = {"<module>", "Trainer.train", "Trainer.load_batch"};
  for (uint64_t i = 0; i < 3; ++i) {
    auto code = with_header<eacgm_py_code>(EACGM_EV_PY_CODE, EACGM_LAYER_PYTHON);
    code.code = 0x7f0000001000ull + 0x100 * i;
    code.firstlineno = static_cast<uint32_t>(1 + 10 * i);
    std::snprintf(code.name, sizeof(code.name), "%s", names[i]);
    std::snprintf(code.file, sizeof(code.file), "/job/train.py");
    code.linetable_len = 8;
    for (uint32_t b = 0; b < 8; ++b) code.linetable[b] = static_cast<uint8_t>(0x80 | b);
    eacgm::fuzz::append_record(session, bytes(code));
  }
  for (uint64_t s = 0; s < 100; ++s) {
    auto sample = with_header<eacgm_py_sample>(EACGM_EV_PY_SAMPLE, EACGM_LAYER_PYTHON);
    sample.hdr.ts_ns += s * 10'000'000;
    sample.nframes = s % 3 + 1;
    sample.thread_state = static_cast<uint32_t>(s % 4);
    for (uint32_t f = 0; f < sample.nframes; ++f) {
      sample.frames[f].code = 0x7f0000001000ull + 0x100 * (sample.nframes - 1 - f);
      sample.frames[f].instr = sample.frames[f].code + 2 * f;
    }
    eacgm::fuzz::append_record(session, bytes(sample));
  }
  write(dir / "python-session", session);
  return 0;
}
