// The ring buffer decoder and the CUDA probe table: what a BPF record turns
// into, argument by argument, and what malformed records are rejected.
#include "reader/decoder.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "layers/cuda/info.h"
#include "test_support.h"

namespace eacgm {
namespace {

size_t cuda_row(std::string_view symbol) {
  auto table = probe_table(Layer::kCuda);
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].symbol == symbol) return i;
  }
  ADD_FAILURE() << symbol << " not in the CUDA table";
  return 0;
}

eacgm_call launch_kernel_record() {
  eacgm_call c{};
  c.hdr = {EACGM_EV_CALL, 100, 101, EACGM_LAYER_CUDA, 5000};
  c.duration_ns = 1234;
  c.func_id = static_cast<uint32_t>(cuda_row("cudaLaunchKernel"));
  c.args[kRdi] = 0x1234;
  c.args[kRsi] = (uint64_t{2} << 32) | 4;    // grid x=4, y=2
  c.args[kRdx] = 1;                          // grid z
  c.args[kRcx] = (uint64_t{1} << 32) | 128;  // block x=128, y=1
  c.args[kR8] = 1;                           // block z
  c.args[kR9] = 0xabc;
  c.args[kStack0] = 256;
  c.args[kStack1] = 0x5678;
  c.ret = 0xffffffff00000000ull;  // garbage above the 32-bit status: still success
  return c;
}

TEST(Decoder, LaunchKernelArgumentsFromRegistersAndStack) {
  eacgm_call c = launch_kernel_record();
  auto event = decode_event(bytes_of(c));
  ASSERT_TRUE(event.ok()) << event.error().message;
  const CallRecord& call = std::get<CallRecord>(*event);
  EXPECT_EQ(call.pid, 100u);
  EXPECT_EQ(call.tid, 101u);
  EXPECT_EQ(call.name(), "cudaLaunchKernel");
  EXPECT_EQ(call.start_ns, 5000u);
  EXPECT_EQ(call.duration_ns, 1234u);
  EXPECT_FALSE(call.failed());
  std::map<std::string, std::string> args;
  for (const DecodedArg& a : decode_args(*call.spec, call.raw)) args[std::string(a.name)] = a.text;
  EXPECT_EQ(args["func"], "0x1234");
  EXPECT_EQ(args["gridDim"], "(4,2,1)");
  EXPECT_EQ(args["blockDim"], "(128,1,1)");
  EXPECT_EQ(args["args"], "0xabc");
  EXPECT_EQ(args["sharedMem"], "256");
  EXPECT_EQ(args["stream"], "0x5678");
}

TEST(Decoder, EveryEventKnowsItsLayer) {
  auto call = decode_event(bytes_of(launch_kernel_record()));
  ASSERT_TRUE(call.ok()) << call.error().message;
  EXPECT_EQ(layer_of(*call), Layer::kCuda);
  const ProbeSpec* launch = find_probe(Layer::kDriver, "cuLaunchKernel");
  ASSERT_NE(launch, nullptr);
  HandleNameEvent named;
  named.spec = launch;
  EXPECT_EQ(layer_of(Event{named}), Layer::kDriver);
  EXPECT_EQ(layer_of(Event{SignalEvent{}}), Layer::kOs);
  EXPECT_EQ(layer_of(Event{OomKillEvent{}}), Layer::kOs);
  EXPECT_EQ(layer_of(Event{MmapEvent{}}), Layer::kOs);
  EXPECT_EQ(layer_of(Event{IoctlEvent{}}), Layer::kOs);
  EXPECT_EQ(layer_of(Event{PySampleEvent{}}), Layer::kPython);
  EXPECT_EQ(layer_of(Event{PyGcEvent{}}), Layer::kPython);
  EXPECT_EQ(layer_of(Event{ProcEvent{}}), std::nullopt);  // the core's: no layer
}

TEST(Decoder, StatusIsSignExtendedFrom32Bits) {
  eacgm_call c = launch_kernel_record();
  c.ret = 0x00000000ffffffffull;  // (int)-1
  auto event = decode_event(bytes_of(c));
  ASSERT_TRUE(event.ok());
  EXPECT_EQ(std::get<CallRecord>(*event).raw.ret, -1);
  EXPECT_TRUE(std::get<CallRecord>(*event).failed());
}

TEST(Decoder, MallocOutPointerAndBytes) {
  eacgm_call c{};
  c.hdr = {EACGM_EV_CALL, 1, 1, EACGM_LAYER_CUDA, 1};
  c.func_id = static_cast<uint32_t>(cuda_row("cudaMalloc"));
  c.args[kRdi] = 0x7ffd0000;  // &devPtr on the caller's stack
  c.args[kRsi] = 1 << 20;
  c.out_value = 0x7e0000000100;
  auto event = decode_event(bytes_of(c));
  ASSERT_TRUE(event.ok());
  const CallRecord& call = std::get<CallRecord>(*event);
  EXPECT_EQ(call.bytes(), 1u << 20);
  auto args = decode_args(*call.spec, call.raw);
  ASSERT_EQ(args.size(), 2u);
  EXPECT_EQ(args[0].text, "0x7e0000000100");
  EXPECT_EQ(args[1].number, 1 << 20);
}

TEST(Decoder, AnAnnouncedCallsKernelCountIsKeptInBothItsEvents) {
  // The collectives' numbering rests on it (layers/nccl/collectives.h ThreadCursor).
  size_t row = 0;
  const auto table = probe_table(Layer::kNccl);
  while (row < table.size() && table[row].symbol != "ncclAllReduce") ++row;
  ASSERT_LT(row, table.size());
  for (const uint32_t kind : {uint32_t{EACGM_EV_CALL_BEGIN}, uint32_t{EACGM_EV_CALL}}) {
    eacgm_call c{};
    c.hdr = {kind, 1, 2, EACGM_LAYER_NCCL, 1};
    c.func_id = static_cast<uint32_t>(row);
    c.announced = 7;
    auto event = decode_event(bytes_of(c));
    ASSERT_TRUE(event.ok()) << event.error().message;
    const CallRecord& call = std::get<CallRecord>(*event);
    EXPECT_EQ(call.announced, 7u);
    EXPECT_EQ(call.finished, kind == EACGM_EV_CALL);
  }
}

TEST(Decoder, ProcessExit) {
  eacgm_proc p{};
  p.hdr = {EACGM_EV_PROC_EXIT, 42, 43, 0, 99};
  p.exit_code = 11;  // killed by SIGSEGV
  std::memcpy(p.comm, "python3", 7);
  auto event = decode_event(bytes_of(p));
  ASSERT_TRUE(event.ok());
  const ProcEvent& e = std::get<ProcEvent>(*event);
  EXPECT_EQ(e.kind, ProcEvent::Kind::kExit);
  EXPECT_EQ(e.pid, 42u);
  EXPECT_EQ(e.status, 11);
  EXPECT_EQ(e.comm, "python3");
}

TEST(Decoder, LoaderStopAndNoticeAreTold) {
  eacgm_proc p{};
  p.hdr = {EACGM_EV_DL_STOP, 42, 43, 0, 99};
  auto stop = decode_event(bytes_of(p));
  ASSERT_TRUE(stop.ok());
  EXPECT_EQ(std::get<ProcEvent>(*stop).kind, ProcEvent::Kind::kLoaderStop);
  p.hdr.kind = EACGM_EV_DL_NOTICE;
  auto notice = decode_event(bytes_of(p));
  ASSERT_TRUE(notice.ok());
  const ProcEvent& e = std::get<ProcEvent>(*notice);
  EXPECT_EQ(e.kind, ProcEvent::Kind::kNotice);
  EXPECT_EQ(e.pid, 42u);
  EXPECT_EQ(e.tid, 43u);
  EXPECT_EQ(e.ts_ns, 99u);
}

TEST(Decoder, UnwindStopKeepsTheSlotsToPutBackInOrder) {
  eacgm_unwind_stop u{};
  u.hdr = {EACGM_EV_UNWIND_STOP, 42, 44, EACGM_LAYER_TORCH, 99};
  u.open_calls = 2;
  u.n = 3;
  u.slot[0] = 0x7ffd1000;
  u.orig[0] = 0x401000;
  u.slot[1] = 0;  // walked, not to be put back
  u.orig[1] = 0x402000;
  u.slot[2] = 0x7ffd1040;
  u.orig[2] = 0x403000;
  u.slot[3] = 0x7ffd2000;  // past n: ignored
  auto event = decode_event(bytes_of(u));
  ASSERT_TRUE(event.ok()) << event.error().message;
  const ProcEvent& e = std::get<ProcEvent>(*event);
  EXPECT_EQ(e.kind, ProcEvent::Kind::kUnwindStop);
  EXPECT_EQ(e.pid, 42u);
  EXPECT_EQ(e.tid, 44u);
  EXPECT_EQ(e.open_calls, 2u);
  const std::vector<std::pair<uint64_t, uint64_t>> want = {{0x7ffd1000, 0x401000},
                                                           {0x7ffd1040, 0x403000}};
  EXPECT_EQ(e.return_slots, want);
  u.n = EACGM_UNWIND_SLOTS + 1;
  auto bad = decode_event(bytes_of(u));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("65 slots"), std::string::npos) << bad.error().message;
  EXPECT_FALSE(decode_event(bytes_of(u, sizeof(u) - 8)).ok());
}

TEST(Decoder, RejectsTruncatedUnknownAndOutOfTableRecords) {
  eacgm_call c = launch_kernel_record();
  auto bytes = bytes_of(c);
  EXPECT_FALSE(decode_event(std::span(bytes).first(10)).ok());
  EXPECT_FALSE(decode_event(std::span(bytes).first(sizeof(c) - 1)).ok());
  c.func_id = 100000;
  EXPECT_FALSE(decode_event(bytes_of(c)).ok());
  c = launch_kernel_record();
  c.hdr.kind = 77;
  auto bad = decode_event(bytes_of(c));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("unknown event kind 77"), std::string::npos);
}

TEST(Decoder, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::byte> data(rng() % 200);
    for (auto& b : data) b = static_cast<std::byte>(rng());
    if (data.size() >= 4 && rng() % 2) {
      const uint32_t kind = 1 + rng() % 5;
      std::memcpy(data.data(), &kind, 4);
    }
    (void)decode_event(data);
  }
}

TEST(ProbeTable, NamesAndErrors) {
  EXPECT_EQ(cuda_error_name(0), "cudaSuccess");
  EXPECT_EQ(cuda_error_name(2), "cudaErrorMemoryAllocation");
  EXPECT_EQ(cuda_error_name(35), "cudaErrorInsufficientDriver");
  EXPECT_EQ(cuda_error_name(100), "cudaErrorNoDevice");
  EXPECT_EQ(cuda_error_name(123456), "cudaErrorUnknownCode");
  EXPECT_EQ(memcpy_kind_name(1), "cudaMemcpyHostToDevice");
  EXPECT_EQ(memcpy_kind_name(9), "cudaMemcpyInvalidKind");
  EXPECT_EQ(layer_from_name("cuda"), Layer::kCuda);
  EXPECT_FALSE(layer_from_name("gpux").has_value());
  // Every function the foundation issue names has a row.
  for (std::string_view f :
       {"cudaMalloc", "cudaFree", "cudaMallocHost", "cudaFreeHost", "cudaMallocManaged",
        "cudaMallocAsync", "cudaFreeAsync", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset",
        "cudaMemsetAsync", "cudaLaunchKernel", "cudaGraphLaunch", "cudaStreamSynchronize",
        "cudaDeviceSynchronize", "cudaEventSynchronize"}) {
    cuda_row(f);
  }
}

// The BPF side reads memory only for rows that use it (the read is the dearest
// step of a probe); a row that needs stack words and does not get them would
// decode zeros.
TEST(ProbeTable, StackWordsAreReadOnlyForRowsThatUseThem) {
  const auto row = [](Layer layer, std::string_view symbol) -> const ProbeSpec& {
    for (const ProbeSpec& spec : probe_table(layer)) {
      if (spec.symbol == symbol) return spec;
    }
    ADD_FAILURE() << symbol << " not in its table";
    return probe_table(layer).front();
  };
  const auto stack_words = [](uint32_t words) {
    return EACGM_ENTRY_READ(words, uint32_t{kStack0}, uint32_t{EACGM_READ_STACK}, 0u);
  };
  EXPECT_EQ(bpf_entry_read(row(Layer::kCuda, "cudaLaunchKernel")), stack_words(2));
  EXPECT_EQ(bpf_entry_read(row(Layer::kCuda, "cudaMalloc")), 0u);
  EXPECT_EQ(bpf_entry_read(row(Layer::kCuda, "cudaStreamSynchronize")), 0u);
  EXPECT_EQ(bpf_entry_read(row(Layer::kCuda, "cudaMemcpyAsync")), 0u);  // 5 register args
  // ncclAllReduce's stream is its 7th argument; collectives announce their start.
  EXPECT_EQ(bpf_entry_read(row(Layer::kNccl, "ncclAllReduce")), stack_words(1));
  EXPECT_EQ(bpf_row_flags(row(Layer::kNccl, "ncclAllReduce")), EACGM_ROW_EMIT_ENTRY);
  EXPECT_EQ(bpf_entry_read(row(Layer::kNccl, "ncclGroupStart")), 0u);
  // The communicator's id is passed in memory (collectives.cpp names it by those words).
  EXPECT_EQ(bpf_entry_read(row(Layer::kNccl, "ncclCommInitRank")), stack_words(2));
  // cuLaunchKernel's 7th to 9th arguments: blockDimZ, sharedMemBytes, hStream.
  EXPECT_EQ(bpf_entry_read(row(Layer::kDriver, "cuLaunchKernel")), stack_words(3));
  // cuLaunchKernelEx's shape and stream: five words of *config into rcx..stack1.
  EXPECT_EQ(bpf_entry_read(row(Layer::kDriver, "cuLaunchKernelEx")),
            EACGM_ENTRY_READ(5u, uint32_t{kRcx}, uint32_t{kRdi}, 0u));
  // cuMemcpy3DAsync: Width, Height and Depth (words 22-24 of *pCopy) after its two arguments.
  EXPECT_EQ(bpf_entry_read(row(Layer::kDriver, "cuMemcpy3DAsync_v2")),
            EACGM_ENTRY_READ(3u, uint32_t{kRdx}, uint32_t{kRdi}, 22u));
  // Every row that declares a stack slot gets it read; a read ends within the captured
  // words; the extra word is never a row's out-pointer pointee as well.
  for (Layer layer : all_layers()) {
    for (const ProbeSpec& spec : probe_table(layer)) {
      const uint32_t read = bpf_entry_read(spec);
      const uint32_t words = read & 0xf, into = (read >> 4) & 0xf;
      if (read) {
        EXPECT_LE(into + words, uint32_t{EACGM_CALL_WORDS}) << spec.symbol;
      }
      for (const ArgSpec& arg : spec.args) {
        if (arg.slot >= kStack0 && arg.slot != kNoSlot) {
          EXPECT_NE(read, 0u) << spec.symbol;
          EXPECT_GT(into + words, uint32_t{arg.slot}) << spec.symbol << " " << arg.name;
        }
        if (arg.slot == kExtra) {
          EXPECT_EQ(spec.out_slot, kNoSlot) << spec.symbol;
        }
      }
    }
  }
}

TEST(Decoder, ACodeRecordNeedNotBeAligned) {
  // Found by the record fuzzer: the decoder read the struct in place, through a misaligned
  // pointer, when the bytes did not start on an 8-byte boundary.
  eacgm_py_code code{};
  code.hdr = {EACGM_EV_PY_CODE, 7, 7, EACGM_LAYER_PYTHON, 123};
  code.code = 0x7f0000001000;
  code.firstlineno = 42;
  code.linetable_len = 3;
  code.linetable[0] = 1;
  code.linetable[2] = 3;
  std::snprintf(code.name, sizeof(code.name), "train");
  std::snprintf(code.file, sizeof(code.file), "/job/train.py");
  std::vector<std::byte> shifted(sizeof(code) + 1);
  std::memcpy(shifted.data() + 1, &code, sizeof(code));
  Result<Event> event = decode_event(std::span(shifted).subspan(1));
  ASSERT_TRUE(event) << event.error().message;
  const auto& e = std::get<PyCodeEvent>(*event);
  EXPECT_EQ(e.pid, 7u);
  EXPECT_EQ(e.code, 0x7f0000001000u);
  EXPECT_EQ(e.firstlineno, 42u);
  EXPECT_EQ(e.name, "train");
  EXPECT_EQ(e.file, "/job/train.py");
  EXPECT_EQ(e.linetable, (std::vector<uint8_t>{1, 0, 3}));
  EXPECT_TRUE(e.linetable_complete);
}

}  // namespace
}  // namespace eacgm
