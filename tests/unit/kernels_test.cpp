// Kernels by name: the driver table's rows, the name record a naming call sends, and the
// session's KernelTable (names per process, aliases, reuse of a handle, launches per kernel).
#include "session/kernels.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "analysis/features.h"
#include "analysis/session_db.h"
#include "probe_row.h"
#include "reader/decoder.h"
#include "session/session.h"
#include "sinks/sqlite_writer.h"
#include "test_support.h"

namespace eacgm {
namespace {

uint32_t row_number(Layer layer, std::string_view symbol) {
  const ProbeSpec& spec = probe_row(layer, symbol);
  return static_cast<uint32_t>(&spec - probe_table(layer).data());
}

CallRecord driver_call(std::string_view symbol, uint32_t pid = 10) {
  CallRecord call;
  call.pid = pid;
  call.tid = pid;
  call.spec = &probe_row(Layer::kDriver, symbol);
  call.duration_ns = 1000;
  return call;
}

CallRecord launch(uint64_t handle, uint32_t pid = 10, uint64_t ns = 1000) {
  CallRecord call = driver_call("cuLaunchKernel", pid);
  call.raw.args[kRdi] = handle;
  call.raw.args[kRsi] = 4;  // grid (4,2,1)
  call.raw.args[kRdx] = 2;
  call.raw.args[kRcx] = 1;
  call.raw.args[kR8] = 128;  // block (128,1,1)
  call.raw.args[kR9] = 1;
  call.raw.args[kStack0] = 1;
  call.raw.args[kStack1] = 512;
  call.raw.out_value = 0x5678;  // the extra word: the third stack word, hStream
  call.duration_ns = ns;
  return call;
}

TEST(DriverTable, LaunchShapesAndMemsetBytesDecode) {
  CallRecord call = launch(0x1234);
  std::vector<std::string> texts;
  for (const DecodedArg& a : call.decoded_args())
    texts.push_back(std::string(a.name) + "=" + a.text);
  EXPECT_EQ(texts, (std::vector<std::string>{"f=0x1234", "grid=(4,2,1)", "block=(128,1,1)",
                                             "sharedMemBytes=512", "hStream=0x5678"}));
  // blockDimZ, sharedMemBytes and hStream are stack words: the row must ask BPF for them.
  EXPECT_EQ(bpf_entry_read(*call.spec) & 0xf, 3u);
  CallRecord set = driver_call("cuMemsetD32_v2");
  set.raw.args[kRdx] = 100;
  EXPECT_EQ(set.bytes(), 400u);
  CallRecord set16 = driver_call("cuMemsetD16Async");
  set16.raw.args[kRdx] = 100;
  EXPECT_EQ(set16.bytes(), 200u);
}

// cuLaunchKernelEx: BPF copies *config's first five words over rcx..stack1
// (layers/driver/probes.cpp).
TEST(DriverTable, LaunchExShapeAndStreamComeFromItsConfig) {
  CallRecord call = driver_call("cuLaunchKernelEx");
  call.raw.args[kRdi] = 0x7000;  // config
  call.raw.args[kRsi] = 0xf00;   // f
  // CUlaunchConfig {grid 8,4,2; block 64,2,1; shared 1024; stream 0xabc}, as little-endian words.
  call.raw.args[kRcx] = 8 | uint64_t{4} << 32;
  call.raw.args[kR8] = 2 | uint64_t{64} << 32;
  call.raw.args[kR9] = 2 | uint64_t{1} << 32;
  call.raw.args[kStack0] = 1024 | uint64_t{0xdead} << 32;  // the padding is garbage
  call.raw.args[kStack1] = 0xabc;
  std::vector<std::string> texts;
  for (const DecodedArg& a : call.decoded_args())
    texts.push_back(std::string(a.name) + "=" + a.text);
  EXPECT_EQ(texts, (std::vector<std::string>{"config=0x7000", "f=0xf00", "kernelParams=0x0",
                                             "grid=(8,4,2)", "block=(64,2,1)",
                                             "sharedMemBytes=1024", "hStream=0xabc"}));
  EXPECT_EQ(call.spec->kernel_slot, kRsi);
}

TEST(DriverTable, CopiesOfTwoAndThreeDimensionsMoveTheirExtent) {
  CallRecord copy2d = driver_call("cuMemcpy2D_v2");
  copy2d.raw.args[kRsi] = 640;  // WidthInBytes, read from *pCopy
  copy2d.raw.args[kRdx] = 48;   // Height
  EXPECT_EQ(copy2d.bytes(), 640u * 48u);
  CallRecord copy3d = driver_call("cuMemcpy3DAsync_v2");
  copy3d.raw.args[kRsi] = 0x99;  // hStream
  copy3d.raw.args[kRdx] = 256;
  copy3d.raw.args[kRcx] = 4;
  copy3d.raw.args[kR8] = 3;
  EXPECT_EQ(copy3d.bytes(), 256u * 4u * 3u);
  CallRecord pitch = driver_call("cuMemAllocPitch_v2");
  pitch.raw.args[kRdx] = 100;
  pitch.raw.args[kRcx] = 7;
  EXPECT_EQ(pitch.bytes(), 700u);
  EXPECT_EQ(pitch.spec->memory, MemoryEffect::kDeviceAlloc);
  CallRecord peer = driver_call("cuMemcpyPeerAsync");
  peer.raw.args[kR8] = 4096;
  EXPECT_EQ(peer.bytes(), 4096u);
}

TEST(DriverTable, NamingRowsTellBpfWhereTheNameAndHandleAre) {
  const ProbeSpec& get = probe_row(Layer::kDriver, "cuModuleGetFunction");
  EXPECT_EQ(row_number(Layer::kDriver, "cuModuleGetFunction"), 79u);  // the fuzzer's seed's row
  EXPECT_TRUE(bpf_row_flags(get) & EACGM_ROW_NAMES);
  EXPECT_EQ(bpf_name_slots(get), EACGM_NAME_KEY_OUT << 4 | kRdx);
  const ProbeSpec& reg = probe_row(Layer::kCuda, "__cudaRegisterFunction");
  EXPECT_EQ(bpf_name_slots(reg), kRsi << 4 | kRdx);
  EXPECT_FALSE(bpf_row_flags(probe_row(Layer::kDriver, "cuLaunchKernel")) & EACGM_ROW_NAMES);
  EXPECT_EQ(bpf_name_slots(probe_row(Layer::kDriver, "cuLaunchKernel")), 0);
}

TEST(DriverTable, ResultsAreNamedAsCudaHNamesThem) {
  EXPECT_EQ(status_name(Layer::kDriver, 0), "CUDA_SUCCESS");
  EXPECT_EQ(status_name(Layer::kDriver, 34), "CUDA_ERROR_STUB_LIBRARY");
  EXPECT_EQ(status_name(Layer::kDriver, 400), "CUDA_ERROR_INVALID_HANDLE");
  EXPECT_EQ(status_name(Layer::kDriver, 999), "CUDA_ERROR_UNKNOWN");
  EXPECT_EQ(status_name(Layer::kDriver, 12345), "CUDA_ERROR_UNKNOWN_CODE");
  EXPECT_EQ(layer_from_name("driver"), Layer::kDriver);
  EXPECT_EQ(library_layer("/usr/lib/x86_64-linux-gnu/libcuda.so.1"), Layer::kDriver);
  EXPECT_EQ(library_layer("/usr/local/cuda/lib64/libcudart.so.13"), Layer::kCuda);
}

TEST(DriverTable, DriverCallsHaveTheRuntimeCallsClasses) {
  EXPECT_EQ(api_class(Layer::kDriver, "cuLaunchKernel"), ApiClass::kLaunch);
  EXPECT_EQ(api_class(Layer::kDriver, "cuLaunchKernelEx_ptsz"), ApiClass::kLaunch);
  EXPECT_EQ(api_class(Layer::kCuda, "cudaLaunchKernel_ptsz"), ApiClass::kLaunch);
  EXPECT_EQ(api_class(Layer::kDriver, "cuStreamSynchronize"), ApiClass::kSync);
  EXPECT_EQ(api_class(Layer::kDriver, "cuMemcpyHtoDAsync_v2"), ApiClass::kCopy);
  EXPECT_EQ(api_class(Layer::kDriver, "cuMemAlloc_v2"), ApiClass::kAlloc);
  EXPECT_EQ(api_class(Layer::kDriver, "cuMemFree_v2"), ApiClass::kFree);
  EXPECT_EQ(api_class(Layer::kDriver, "cuModuleGetFunction"), ApiClass::kOther);
}

// A row's class is stated once, in the table; here it must agree with what the row's other facts
// say, so that no row counts as a launch without naming a kernel, or frees without a class.
TEST(ProbeTables, EachRowsClassAgreesWithWhatItDoes) {
  std::vector<std::string> unclassified;
  for (Layer layer : {Layer::kCuda, Layer::kDriver, Layer::kNccl}) {
    for (const ProbeSpec& spec : probe_table(layer)) {
      SCOPED_TRACE(std::string(spec.symbol));
      if (spec.kernel_slot != kNoSlot) {
        EXPECT_EQ(spec.api_class, ApiClass::kLaunch);
      }
      if (spec.memory == MemoryEffect::kDeviceAlloc || spec.memory == MemoryEffect::kHostAlloc) {
        EXPECT_EQ(spec.api_class, ApiClass::kAlloc);
      }
      if (spec.memory == MemoryEffect::kDeviceFree || spec.memory == MemoryEffect::kHostFree) {
        EXPECT_EQ(spec.api_class, ApiClass::kFree);
      }
      const bool collective =
          spec.role == CallRole::kCollective || spec.role == CallRole::kPointToPoint;
      EXPECT_EQ(spec.api_class == ApiClass::kCollective, collective);
      if (spec.api_class == ApiClass::kCopy) {
        EXPECT_NE(spec.bytes_slot, kNoSlot);
      }
      if (spec.api_class == ApiClass::kOther) unclassified.emplace_back(spec.symbol);
    }
  }
  // What is none of the classes: naming and loading, set-up, communicators, groups, mappings.
  EXPECT_EQ(unclassified, (std::vector<std::string>{"__cudaRegisterFunction",
                                                    "cuMemMap",
                                                    "cuMemUnmap",
                                                    "cuModuleLoad",
                                                    "cuModuleLoadData",
                                                    "cuModuleLoadDataEx",
                                                    "cuModuleLoadFatBinary",
                                                    "cuLibraryLoadData",
                                                    "cuLibraryLoadFromFile",
                                                    "cuModuleGetFunction",
                                                    "cuLibraryGetKernel",
                                                    "cuKernelGetFunction",
                                                    "cuInit",
                                                    "cuDevicePrimaryCtxRetain",
                                                    "cuCtxCreate_v2",
                                                    "cuCtxCreate_v3",
                                                    "cuCtxCreate_v4",
                                                    "ncclCommInitRank",
                                                    "ncclCommInitRankConfig",
                                                    "ncclCommInitAll",
                                                    "ncclCommSplit",
                                                    "ncclCommDestroy",
                                                    "ncclCommAbort",
                                                    "ncclGroupStart",
                                                    "ncclGroupEnd"}));
  EXPECT_EQ(api_class(Layer::kTorch, "aten::addmm"), ApiClass::kOther);
  EXPECT_EQ(api_class(Layer::kCuda, "cudaNoSuchCall"), ApiClass::kOther);
}

TEST(NameRecord, DecodesToTheHandleAndItsName) {
  eacgm_name n{};
  n.hdr = {EACGM_EV_NAME, 10, 11, EACGM_LAYER_DRIVER, 500};
  n.key = 0x7d00;
  n.ret = 0xffffffff00000000ull;  // garbage above a 32-bit CUresult: success
  n.func_id = row_number(Layer::kDriver, "cuModuleGetFunction");
  std::strcpy(n.name, "_Z6vecAddPfS_S_i");
  std::vector<std::byte> bytes(sizeof(n));
  std::memcpy(bytes.data(), &n, sizeof(n));
  auto event = decode_event(bytes);
  ASSERT_TRUE(event.ok()) << event.error().message;
  const auto& named = std::get<HandleNameEvent>(*event);
  EXPECT_EQ(named.pid, 10u);
  EXPECT_EQ(named.handle, 0x7d00u);
  EXPECT_FALSE(named.failed());
  EXPECT_EQ(named.name, "_Z6vecAddPfS_S_i");
  // A name record claiming a row that names nothing, or none at all, is rejected.
  n.func_id = row_number(Layer::kDriver, "cuLaunchKernel");
  std::memcpy(bytes.data(), &n, sizeof(n));
  EXPECT_FALSE(decode_event(bytes).ok());
  n.func_id = 5000;
  std::memcpy(bytes.data(), &n, sizeof(n));
  EXPECT_FALSE(decode_event(bytes).ok());
  bytes.resize(sizeof(n) - 1);
  EXPECT_FALSE(decode_event(bytes).ok());
}

TEST(KernelTable, LaunchesAreNamedPerProcessAndAliasesFollow) {
  Session s;
  s.kernels.name_handle(10, 0x100, "_Z6vecAddPfS_S_i");
  s.kernels.name_handle(11, 0x100, "_Z7reluFwdPfi");  // the same handle in another process
  CallRecord alias = driver_call("cuKernelGetFunction");
  alias.raw.args[kRsi] = 0x100;
  alias.raw.out_value = 0x200;
  s.add_call(alias);
  for (auto [handle, pid] : {std::pair{0x100u, 10u}, {0x200u, 10u}, {0x100u, 11u}, {0x300u, 10u}}) {
    CallRecord call = launch(handle, pid);
    call.kernel = s.kernels.kernel_of(call);
    s.add_call(call);
  }
  const auto& stats = s.kernels.stats();
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats.at({Layer::kDriver, "_Z6vecAddPfS_S_i"}).launches, 2u);
  EXPECT_EQ(stats.at({Layer::kDriver, "_Z7reluFwdPfi"}).launches, 1u);
  EXPECT_EQ(stats.at({Layer::kDriver, ""}).launches, 1u);  // never named
  const KernelStats& vec = stats.at({Layer::kDriver, "_Z6vecAddPfS_S_i"});
  EXPECT_EQ(vec.shapes, (std::map<std::string, uint64_t>{{"grid (4,2,1) block (128,1,1)", 2}}));
  EXPECT_EQ(vec.pids, (std::map<uint32_t, uint64_t>{{10, 2}}));
}

TEST(KernelTable, AReusedHandleNamesTheNewKernelAndOldCallsKeepTheirs) {
  KernelTable t;
  t.name_handle(10, 0x100, "_Z3oldv");
  CallRecord first = launch(0x100);
  const std::string* before = t.kernel_of(first);
  ASSERT_NE(before, nullptr);
  t.name_handle(10, 0x100, "_Z3newv");
  EXPECT_EQ(*before, "_Z3oldv");  // still valid: calls already point to it
  EXPECT_EQ(*t.kernel_of(first), "_Z3newv");
  t.name_handle(10, 0, "_Z4nullv");  // a null handle names nothing
  t.name_handle(10, 0x400, "");
  EXPECT_EQ(t.names_known(), 1u);
}

TEST(KernelTable, FailedLaunchesCountAsErrorsWithoutShapes) {
  KernelTable t;
  t.name_handle(10, 0x100, "_Z6vecAddPfS_S_i");
  CallRecord bad = launch(0x100, 10, 50);
  bad.raw.ret = 400;
  t.add_launch(bad, t.kernel_of(bad));
  const KernelStats& k = t.stats().at({Layer::kDriver, "_Z6vecAddPfS_S_i"});
  EXPECT_EQ(k.launches, 1u);
  EXPECT_EQ(k.errors, 1u);
  EXPECT_TRUE(k.shapes.empty());
  EXPECT_EQ(k.percentile_ns(50), 50u);
}

TEST(KernelTable, DistinctKernelsAreBounded) {
  KernelTable t;
  for (uint64_t i = 1; i <= KernelTable::kMaxKernels + 10; ++i) {
    t.name_handle(10, i, "_Z1kv" + std::to_string(i));
    CallRecord call = launch(i);
    t.add_launch(call, t.kernel_of(call));
  }
  EXPECT_EQ(t.stats().size(), KernelTable::kMaxKernels);
  EXPECT_EQ(t.unlisted(), 10u);
}

TEST(KernelTable, ALaunchIsChargedToTheInnermostTorchOperatorAroundIt) {
  static const ProbeSpec kMm{.symbol = "aten::mm", .layer = Layer::kTorch, .args = {}};
  static const ProbeSpec kLinear{.symbol = "aten::linear", .layer = Layer::kTorch, .args = {}};
  auto op = [](const ProbeSpec& spec, uint64_t start, uint64_t ns, uint32_t depth) {
    CallRecord call;
    call.pid = call.tid = 10;
    call.spec = &spec;
    call.start_ns = start;
    call.duration_ns = ns;
    call.depth = depth;
    return call;
  };
  Session s;
  s.kernels.name_handle(10, 0x100, "_Z4gemmv");
  // aten::linear [100, 400] calls aten::mm [150, 300], which launches at 200; linear itself
  // launches at 350; a launch at 500 is outside every operator. Events arrive as calls return.
  for (uint64_t start : {200u, 350u, 500u}) {
    CallRecord call = launch(0x100);
    call.start_ns = start;
    call.depth = start == 500 ? 0 : 2;
    call.kernel = s.kernels.kernel_of(call);
    if (start == 350) s.add_call(op(kMm, 150, 150, 1));
    if (start == 500) s.add_call(op(kLinear, 100, 300, 0));
    s.add_call(call);
  }
  const KernelStats& k = s.kernels.stats().at({Layer::kDriver, "_Z4gemmv"});
  EXPECT_EQ(k.launches, 3u);
  EXPECT_EQ(k.torch_ops, (std::map<std::string, uint64_t>{{"aten::linear", 1}, {"aten::mm", 1}}));
}

TEST(CallRecord, AnInnerCallIsMarkedSo) {
  eacgm_call c{};
  c.hdr = {EACGM_EV_CALL, 10, 11, EACGM_LAYER_DRIVER, 500};
  c.func_id = row_number(Layer::kDriver, "cuLaunchKernel");
  c.flags = EACGM_CALL_INNER;
  std::vector<std::byte> bytes(sizeof(c));
  std::memcpy(bytes.data(), &c, sizeof(c));
  auto event = decode_event(bytes);
  ASSERT_TRUE(event.ok()) << event.error().message;
  EXPECT_TRUE(std::get<CallRecord>(*event).inner);
  c.flags = 0;
  std::memcpy(bytes.data(), &c, sizeof(c));
  EXPECT_FALSE(std::get<CallRecord>(*decode_event(bytes)).inner);
}

TEST(CallRecord, AnInnerCallIsWrittenButReplayedOnce) {
  // cudaMalloc ran cuMemAlloc_v2: the database keeps both, the offline analysis sees one.
  TempDir dir;
  auto writer = SqliteWriter::open((dir.path() / "events.sqlite").string());
  ASSERT_TRUE(writer.ok()) << writer.error().message;
  CallRecord runtime;
  runtime.pid = runtime.tid = 10;
  runtime.spec = &probe_row(Layer::kCuda, "cudaMalloc");
  runtime.start_ns = 100;
  runtime.duration_ns = 50;
  runtime.raw.args[kRsi] = 4096;
  runtime.raw.out_value = 0x7000;
  CallRecord inner = driver_call("cuMemAlloc_v2");
  inner.start_ns = 110;
  inner.duration_ns = 20;
  inner.depth = 1;
  inner.inner = true;
  inner.raw.args[kRsi] = 4096;
  inner.raw.out_value = 0x7000;
  (*writer)->on_call(inner);
  (*writer)->on_call(runtime);
  Session session;
  session.start_ns = 0;
  session.end_ns = 1000;
  ASSERT_TRUE((*writer)->finish(session).ok());
  auto recorded = load_recorded_session(dir.path().string());
  ASSERT_TRUE(recorded.ok()) << recorded.error().message;
  ASSERT_EQ((*recorded)->calls.size(), 1u);
  EXPECT_EQ((*recorded)->calls[0].name, "cudaMalloc");
}

TEST(KernelNames, AreDemangledForPeopleAndKeptOtherwise) {
  EXPECT_EQ(demangled_kernel_name("_Z6vecAddPfS_S_i"), "vecAdd(float*, float*, float*, int)");
  EXPECT_EQ(demangled_kernel_name("_Z4gemmILi128EEvPKfS1_Pfiii"),
            "void gemm<128>(float const*, float const*, float*, int, int, int)");
  EXPECT_EQ(demangled_kernel_name("triton_poi_fused_add_0"), "triton_poi_fused_add_0");
  EXPECT_EQ(demangled_kernel_name("_Znot a name"), "_Znot a name");
}

}  // namespace
}  // namespace eacgm
