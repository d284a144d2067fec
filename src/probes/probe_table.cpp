#include "probes/probe_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

namespace eacgm {
namespace {

// The CUDA runtime layer. Signatures from the CUDA Runtime API reference; the
// slot of each argument follows the SysV x86-64 calling convention: integer
// and pointer arguments in rdi, rsi, rdx, rcx, r8, r9, and a dim3 (12 bytes,
// INTEGER class) by value in two registers: x|y<<32, then z.
const std::vector<ProbeSpec>& cuda_table() {
  // cudaLaunchKernel(func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
  // cudaStream_t stream): the two dims take four registers, so sharedMem and stream are
  // the first two stack arguments. `func` is the kernel's host stub.
  auto launch = [](std::string_view name) {
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kCuda,
                     .api_class = ApiClass::kLaunch,
                     .args = {{"func", kRdi, ArgFormat::kPointer},
                              {"gridDim", kRsi, ArgFormat::kDim3},
                              {"blockDim", kRcx, ArgFormat::kDim3},
                              {"args", kR9, ArgFormat::kPointer},
                              {"sharedMem", kStack0, ArgFormat::kSize},
                              {"stream", kStack1, ArgFormat::kPointer}},
                     .kernel_slot = kRdi};
  };
  // cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args): the
  // shape is in *config (driver_types.h): two dim3 (24 bytes), size_t dynamicSmemBytes, then
  // the stream, read into the words from rcx on: grid x|y, grid z|block x, block y|z, shared
  // memory, stream.
  auto launch_ex = [](std::string_view name) {
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kCuda,
                     .api_class = ApiClass::kLaunch,
                     .args = {{"config", kRdi, ArgFormat::kPointer},
                              {"func", kRsi, ArgFormat::kPointer},
                              {"args", kRdx, ArgFormat::kPointer},
                              {"gridDim", kRcx, ArgFormat::kDim3},
                              {"blockDim", kR8, ArgFormat::kDim3High},
                              {"dynamicSmemBytes", kStack0, ArgFormat::kSize},
                              {"stream", kStack1, ArgFormat::kPointer}},
                     .kernel_slot = kRsi,
                     .read = MemoryRead{.from = kRdi, .offset_words = 0, .into = kRcx, .words = 5}};
  };
  auto memcpy_ = [](std::string_view name, bool async) {
    std::vector<ArgSpec> args = {{"dst", kRdi, ArgFormat::kPointer},
                                 {"src", kRsi, ArgFormat::kPointer},
                                 {"count", kRdx, ArgFormat::kSize},
                                 {"kind", kRcx, ArgFormat::kMemcpyKind}};
    if (async) args.push_back({"stream", kR8, ArgFormat::kPointer});
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kCuda,
                     .api_class = ApiClass::kCopy,
                     .args = std::move(args),
                     .bytes_slot = kRdx};
  };
  auto memset_ = [](std::string_view name, bool async) {
    std::vector<ArgSpec> args = {{"devPtr", kRdi, ArgFormat::kPointer},
                                 {"value", kRsi, ArgFormat::kInt},
                                 {"count", kRdx, ArgFormat::kSize}};
    if (async) args.push_back({"stream", kRcx, ArgFormat::kPointer});
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kCuda,
                     .api_class = ApiClass::kCopy,
                     .args = std::move(args),
                     .bytes_slot = kRdx};
  };
  auto malloc_async = [](std::string_view name) {
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kCuda,
                     .api_class = ApiClass::kAlloc,
                     .args = {{"devPtr", kRdi, ArgFormat::kOutPointer},
                              {"size", kRsi, ArgFormat::kSize},
                              {"stream", kRdx, ArgFormat::kPointer}},
                     .bytes_slot = kRsi,
                     .out_slot = kRdi,
                     .memory = MemoryEffect::kDeviceAlloc};
  };
  auto free_async = [](std::string_view name) {
    return ProbeSpec{
        .symbol = name,
        .layer = Layer::kCuda,
        .api_class = ApiClass::kFree,
        .args = {{"devPtr", kRdi, ArgFormat::kPointer}, {"stream", kRsi, ArgFormat::kPointer}},
        .memory = MemoryEffect::kDeviceFree,
        .memory_ptr_slot = kRdi};
  };
  auto graph_launch = [](std::string_view name) {
    return ProbeSpec{
        .symbol = name,
        .layer = Layer::kCuda,
        .api_class = ApiClass::kLaunch,
        .args = {{"graphExec", kRdi, ArgFormat::kPointer}, {"stream", kRsi, ArgFormat::kPointer}}};
  };
  auto stream_synchronize = [](std::string_view name) {
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kCuda,
                     .api_class = ApiClass::kSync,
                     .args = {{"stream", kRdi, ArgFormat::kPointer}}};
  };
  static const std::vector<ProbeSpec> table = {
      {.symbol = "cudaMalloc",
       .layer = Layer::kCuda,
       .api_class = ApiClass::kAlloc,
       .args = {{"devPtr", kRdi, ArgFormat::kOutPointer}, {"size", kRsi, ArgFormat::kSize}},
       .bytes_slot = kRsi,
       .out_slot = kRdi,
       .memory = MemoryEffect::kDeviceAlloc},
      {.symbol = "cudaFree",
       .layer = Layer::kCuda,
       .api_class = ApiClass::kFree,
       .args = {{"devPtr", kRdi, ArgFormat::kPointer}},
       .memory = MemoryEffect::kDeviceFree,
       .memory_ptr_slot = kRdi},
      {.symbol = "cudaMallocHost",
       .layer = Layer::kCuda,
       .api_class = ApiClass::kAlloc,
       .args = {{"ptr", kRdi, ArgFormat::kOutPointer}, {"size", kRsi, ArgFormat::kSize}},
       .bytes_slot = kRsi,
       .out_slot = kRdi,
       .memory = MemoryEffect::kHostAlloc},
      {.symbol = "cudaFreeHost",
       .layer = Layer::kCuda,
       .api_class = ApiClass::kFree,
       .args = {{"ptr", kRdi, ArgFormat::kPointer}},
       .memory = MemoryEffect::kHostFree,
       .memory_ptr_slot = kRdi},
      {.symbol = "cudaMallocManaged",
       .layer = Layer::kCuda,
       .api_class = ApiClass::kAlloc,
       .args = {{"devPtr", kRdi, ArgFormat::kOutPointer},
                {"size", kRsi, ArgFormat::kSize},
                {"flags", kRdx, ArgFormat::kUInt}},
       .bytes_slot = kRsi,
       .out_slot = kRdi,
       .memory = MemoryEffect::kDeviceAlloc},
      malloc_async("cudaMallocAsync"),
      free_async("cudaFreeAsync"),
      memcpy_("cudaMemcpy", false),
      memcpy_("cudaMemcpyAsync", true),
      memset_("cudaMemset", false),
      memset_("cudaMemsetAsync", true),
      launch("cudaLaunchKernel"),
      graph_launch("cudaGraphLaunch"),
      stream_synchronize("cudaStreamSynchronize"),
      {.symbol = "cudaDeviceSynchronize",
       .layer = Layer::kCuda,
       .api_class = ApiClass::kSync,
       .args = {}},
      {.symbol = "cudaEventSynchronize",
       .layer = Layer::kCuda,
       .api_class = ApiClass::kSync,
       .args = {{"event", kRdi, ArgFormat::kPointer}}},
      // Rows added after the first fifteen keep those rows' numbers (func_id) as they were.
      launch("cudaLaunchKernel_ptsz"),
      launch("cudaLaunchCooperativeKernel"),
      launch("cudaLaunchCooperativeKernel_ptsz"),
      launch_ex("cudaLaunchKernelExC"),
      launch_ex("cudaLaunchKernelExC_ptsz"),
      graph_launch("cudaGraphLaunch_ptsz"),
      stream_synchronize("cudaStreamSynchronize_ptsz"),
      // Every nvcc-built library's constructor registers each kernel's host stub (the `func`
      // of a launch) with its device name. Returns nothing.
      {.symbol = "__cudaRegisterFunction",
       .layer = Layer::kCuda,
       .args = {{"fatCubinHandle", kRdi, ArgFormat::kPointer},
                {"hostFun", kRsi, ArgFormat::kPointer},
                {"deviceFun", kRdx, ArgFormat::kCString}},
       .returns_status = false,
       .name_slot = kRdx,
       .name_key_slot = kRsi},
      // The per-thread default stream variants (nvcc --default-stream per-thread) of the rest.
      memcpy_("cudaMemcpy_ptds", false),
      memcpy_("cudaMemcpyAsync_ptsz", true),
      memset_("cudaMemset_ptds", false),
      memset_("cudaMemsetAsync_ptsz", true),
      malloc_async("cudaMallocAsync_ptsz"),
      free_async("cudaFreeAsync_ptsz"),
  };
  return table;
}

// The NCCL layer. Signatures from nccl.h. ncclUniqueId is 128 bytes passed by
// value, so it travels in memory and takes no register: ncclCommInitRank's
// `rank` is the third integer argument, and the first 16 bytes of the id
// are the two captured stack words (they identify the communicator across
// processes).
const std::vector<ProbeSpec>& nccl_table() {
  auto collective = [](std::string_view name, std::vector<ArgSpec> args, Slot comm) {
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kNccl,
                     .api_class = ApiClass::kCollective,
                     .args = std::move(args),
                     .bytes_slot = kRdx,
                     .dtype_slot = kRcx,
                     .emit_entry = true,
                     .role = CallRole::kCollective,
                     .comm_slot = comm};
  };
  const ArgSpec send{"sendbuff", kRdi, ArgFormat::kPointer};
  const ArgSpec recv{"recvbuff", kRsi, ArgFormat::kPointer};
  const ArgSpec dtype{"datatype", kRcx, ArgFormat::kNcclDataType};
  static const std::vector<ProbeSpec> table = {
      {.symbol = "ncclCommInitRank",
       .layer = Layer::kNccl,
       .args = {{"comm", kRdi, ArgFormat::kOutPointer},
                {"nranks", kRsi, ArgFormat::kInt},
                {"rank", kRdx, ArgFormat::kInt}},
       .out_slot = kRdi,
       .role = CallRole::kCommInit,
       .rank_slot = kRdx,
       .nranks_slot = kRsi},
      {.symbol = "ncclCommInitRankConfig",
       .layer = Layer::kNccl,
       .args = {{"comm", kRdi, ArgFormat::kOutPointer},
                {"nranks", kRsi, ArgFormat::kInt},
                {"rank", kRdx, ArgFormat::kInt},
                {"config", kRcx, ArgFormat::kPointer}},
       .out_slot = kRdi,
       .role = CallRole::kCommInit,
       .rank_slot = kRdx,
       .nranks_slot = kRsi},
      {.symbol = "ncclCommInitAll",
       .layer = Layer::kNccl,
       .args = {{"comms", kRdi, ArgFormat::kPointer},
                {"ndev", kRsi, ArgFormat::kInt},
                {"devlist", kRdx, ArgFormat::kPointer}}},
      {.symbol = "ncclCommSplit",
       .layer = Layer::kNccl,
       .args = {{"comm", kRdi, ArgFormat::kPointer},
                {"color", kRsi, ArgFormat::kInt},
                {"key", kRdx, ArgFormat::kInt},
                {"newcomm", kRcx, ArgFormat::kOutPointer},
                {"config", kR8, ArgFormat::kPointer}},
       .out_slot = kRcx},
      {.symbol = "ncclCommDestroy",
       .layer = Layer::kNccl,
       .args = {{"comm", kRdi, ArgFormat::kPointer}},
       .role = CallRole::kCommDestroy,
       .comm_slot = kRdi},
      {.symbol = "ncclCommAbort",
       .layer = Layer::kNccl,
       .args = {{"comm", kRdi, ArgFormat::kPointer}},
       .role = CallRole::kCommDestroy,
       .comm_slot = kRdi},
      collective("ncclAllReduce",
                 {send,
                  recv,
                  {"count", kRdx, ArgFormat::kSize},
                  dtype,
                  {"op", kR8, ArgFormat::kNcclRedOp},
                  {"comm", kR9, ArgFormat::kPointer},
                  {"stream", kStack0, ArgFormat::kPointer}},
                 kR9),
      collective("ncclBroadcast",
                 {send,
                  recv,
                  {"count", kRdx, ArgFormat::kSize},
                  dtype,
                  {"root", kR8, ArgFormat::kInt},
                  {"comm", kR9, ArgFormat::kPointer},
                  {"stream", kStack0, ArgFormat::kPointer}},
                 kR9),
      collective("ncclReduce",
                 {send,
                  recv,
                  {"count", kRdx, ArgFormat::kSize},
                  dtype,
                  {"op", kR8, ArgFormat::kNcclRedOp},
                  {"root", kR9, ArgFormat::kInt},
                  {"comm", kStack0, ArgFormat::kPointer},
                  {"stream", kStack1, ArgFormat::kPointer}},
                 kStack0),
      collective("ncclAllGather",
                 {send,
                  recv,
                  {"sendcount", kRdx, ArgFormat::kSize},
                  dtype,
                  {"comm", kR8, ArgFormat::kPointer},
                  {"stream", kR9, ArgFormat::kPointer}},
                 kR8),
      collective("ncclReduceScatter",
                 {send,
                  recv,
                  {"recvcount", kRdx, ArgFormat::kSize},
                  dtype,
                  {"op", kR8, ArgFormat::kNcclRedOp},
                  {"comm", kR9, ArgFormat::kPointer},
                  {"stream", kStack0, ArgFormat::kPointer}},
                 kR9),
      {.symbol = "ncclSend",
       .layer = Layer::kNccl,
       .api_class = ApiClass::kCollective,
       .args = {send,
                {"count", kRsi, ArgFormat::kSize},
                {"datatype", kRdx, ArgFormat::kNcclDataType},
                {"peer", kRcx, ArgFormat::kInt},
                {"comm", kR8, ArgFormat::kPointer},
                {"stream", kR9, ArgFormat::kPointer}},
       .bytes_slot = kRsi,
       .dtype_slot = kRdx,
       .role = CallRole::kPointToPoint,
       .comm_slot = kR8},
      {.symbol = "ncclRecv",
       .layer = Layer::kNccl,
       .api_class = ApiClass::kCollective,
       .args = {{"recvbuff", kRdi, ArgFormat::kPointer},
                {"count", kRsi, ArgFormat::kSize},
                {"datatype", kRdx, ArgFormat::kNcclDataType},
                {"peer", kRcx, ArgFormat::kInt},
                {"comm", kR8, ArgFormat::kPointer},
                {"stream", kR9, ArgFormat::kPointer}},
       .bytes_slot = kRsi,
       .dtype_slot = kRdx,
       .role = CallRole::kPointToPoint,
       .comm_slot = kR8},
      {.symbol = "ncclGroupStart", .layer = Layer::kNccl, .args = {}},
      {.symbol = "ncclGroupEnd", .layer = Layer::kNccl, .args = {}},
  };
  return table;
}

// The CUDA driver layer (libcuda.so.1). Signatures from the CUDA Driver API reference
// (cuda.h): handles are pointers, CUdeviceptr a 64-bit integer, CUresult an int. cuBLAS, cuDNN,
// NCCL, Triton, TensorFlow and JAX launch here, not through the runtime. A launch's grid and
// block are six unsigned arguments; the sixth integer argument is the last in a register, so
// blockDimZ, sharedMemBytes and hStream are the first three stack words.
const std::vector<ProbeSpec>& driver_table() {
  const ArgSpec stream_rdx{"hStream", kRdx, ArgFormat::kPointer};
  auto launch = [](std::string_view name) {
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kDriver,
                     .api_class = ApiClass::kLaunch,
                     .args = {{"f", kRdi, ArgFormat::kPointer},
                              {"grid", kRsi, ArgFormat::kDim3Split},
                              {"block", kR8, ArgFormat::kDim3Split},
                              {"sharedMemBytes", kStack1, ArgFormat::kUInt32},
                              {"hStream", kExtra, ArgFormat::kPointer}},
                     .kernel_slot = kRdi};
  };
  // cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void**
  // extra): the shape is in *config, seven unsigned ints (grid x y z, block x y z, shared
  // memory; 28 bytes, padded to 32) then hStream, read into the words from rcx on: grid x|y,
  // grid z|block x, block y|z, shared memory, stream.
  auto launch_ex = [](std::string_view name) {
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kDriver,
                     .api_class = ApiClass::kLaunch,
                     .args = {{"config", kRdi, ArgFormat::kPointer},
                              {"f", kRsi, ArgFormat::kPointer},
                              {"kernelParams", kRdx, ArgFormat::kPointer},
                              {"grid", kRcx, ArgFormat::kDim3},
                              {"block", kR8, ArgFormat::kDim3High},
                              {"sharedMemBytes", kStack0, ArgFormat::kUInt32},
                              {"hStream", kStack1, ArgFormat::kPointer}},
                     .kernel_slot = kRsi,
                     .read = MemoryRead{.from = kRdi, .offset_words = 0, .into = kRcx, .words = 5}};
  };
  // cuMemcpy2D/3D(const CUDA_MEMCPY2D/3D* pCopy[, hStream]): the extent is in the struct, after
  // the source and destination fields (size_t or pointer each, the memory types padded to 8):
  // WidthInBytes and Height at words 14 and 15 of CUDA_MEMCPY2D; WidthInBytes, Height and Depth
  // at words 22 to 24 of CUDA_MEMCPY3D. They are read into the words after the arguments.
  auto copy_nd = [](std::string_view name, int dims, bool async) {
    const Slot first = async ? kRdx : kRsi;
    std::vector<ArgSpec> args = {{"pCopy", kRdi, ArgFormat::kPointer}};
    if (async) args.push_back({"hStream", kRsi, ArgFormat::kPointer});
    args.push_back({"WidthInBytes", first, ArgFormat::kSize});
    args.push_back({"Height", static_cast<Slot>(first + 1), ArgFormat::kSize});
    if (dims == 3) args.push_back({"Depth", static_cast<Slot>(first + 2), ArgFormat::kSize});
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kDriver,
                     .api_class = ApiClass::kCopy,
                     .args = std::move(args),
                     .bytes_slot = first,
                     .bytes_times = {static_cast<Slot>(first + 1),
                                     dims == 3 ? static_cast<Slot>(first + 2) : kNoSlot},
                     .read = MemoryRead{.from = kRdi,
                                        .offset_words = static_cast<uint8_t>(dims == 3 ? 22 : 14),
                                        .into = first,
                                        .words = static_cast<uint8_t>(dims)}};
  };
  // cuMemcpyPeer(dstDevice, dstContext, srcDevice, srcContext, ByteCount[, hStream]).
  auto copy_peer = [](std::string_view name, bool async) {
    std::vector<ArgSpec> args = {{"dstDevice", kRdi, ArgFormat::kPointer},
                                 {"dstContext", kRsi, ArgFormat::kPointer},
                                 {"srcDevice", kRdx, ArgFormat::kPointer},
                                 {"srcContext", kRcx, ArgFormat::kPointer},
                                 {"ByteCount", kR8, ArgFormat::kSize}};
    if (async) args.push_back({"hStream", kR9, ArgFormat::kPointer});
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kDriver,
                     .api_class = ApiClass::kCopy,
                     .args = std::move(args),
                     .bytes_slot = kR8};
  };
  auto graph_launch = [](std::string_view name) {
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kDriver,
                     .api_class = ApiClass::kLaunch,
                     .args = {{"hGraphExec", kRdi, ArgFormat::kPointer},
                              {"hStream", kRsi, ArgFormat::kPointer}}};
  };
  // cuMemAlloc-shaped: (CUdeviceptr* out, size_t bytes, ...).
  auto alloc = [](std::string_view name, MemoryEffect effect, std::vector<ArgSpec> more = {}) {
    std::vector<ArgSpec> args = {{"dptr", kRdi, ArgFormat::kOutPointer},
                                 {"bytesize", kRsi, ArgFormat::kSize}};
    args.insert(args.end(), more.begin(), more.end());
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kDriver,
                     .api_class = ApiClass::kAlloc,
                     .args = std::move(args),
                     .bytes_slot = kRsi,
                     .out_slot = kRdi,
                     .memory = effect};
  };
  auto free_ = [](std::string_view name, MemoryEffect effect, std::vector<ArgSpec> more = {}) {
    std::vector<ArgSpec> args = {{"dptr", kRdi, ArgFormat::kPointer}};
    args.insert(args.end(), more.begin(), more.end());
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kDriver,
                     .api_class = ApiClass::kFree,
                     .args = std::move(args),
                     .memory = effect,
                     .memory_ptr_slot = kRdi};
  };
  // cuMemcpy-shaped: (dst, src, size_t bytes[, stream]).
  auto copy = [](std::string_view name, bool async) {
    std::vector<ArgSpec> args = {{"dst", kRdi, ArgFormat::kPointer},
                                 {"src", kRsi, ArgFormat::kPointer},
                                 {"ByteCount", kRdx, ArgFormat::kSize}};
    if (async) args.push_back({"hStream", kRcx, ArgFormat::kPointer});
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kDriver,
                     .api_class = ApiClass::kCopy,
                     .args = std::move(args),
                     .bytes_slot = kRdx};
  };
  // cuMemsetD<bits>: (dst, value, size_t N elements[, stream]).
  auto set = [](std::string_view name, uint8_t element_bytes, bool async) {
    std::vector<ArgSpec> args = {{"dstDevice", kRdi, ArgFormat::kPointer},
                                 {"value", kRsi, ArgFormat::kUInt32},
                                 {"N", kRdx, ArgFormat::kSize}};
    if (async) args.push_back({"hStream", kRcx, ArgFormat::kPointer});
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kDriver,
                     .api_class = ApiClass::kCopy,
                     .args = std::move(args),
                     .bytes_slot = kRdx,
                     .bytes_scale = element_bytes};
  };
  auto sync_on = [](std::string_view name, std::string_view arg) {
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kDriver,
                     .api_class = ApiClass::kSync,
                     .args = {{arg, kRdi, ArgFormat::kPointer}}};
  };
  // cuModuleGetFunction-shaped: (Handle* out, Container, const char* name) names *out.
  auto get_named = [](std::string_view name, std::string_view out, std::string_view container) {
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kDriver,
                     .args = {{out, kRdi, ArgFormat::kOutPointer},
                              {container, kRsi, ArgFormat::kPointer},
                              {"name", kRdx, ArgFormat::kCString}},
                     .out_slot = kRdi,
                     .name_slot = kRdx,
                     .name_key_slot = kRdi};
  };
  auto load = [](std::string_view name, std::string_view out, std::string_view source,
                 ArgFormat source_format) {
    return ProbeSpec{.symbol = name,
                     .layer = Layer::kDriver,
                     .args = {{out, kRdi, ArgFormat::kOutPointer}, {source, kRsi, source_format}},
                     .out_slot = kRdi};
  };
  const ArgSpec stream_rcx{"hStream", kRcx, ArgFormat::kPointer};
  static const std::vector<ProbeSpec> table = {
      launch("cuLaunchKernel"),
      launch("cuLaunchKernel_ptsz"),
      launch("cuLaunchCooperativeKernel"),
      launch("cuLaunchCooperativeKernel_ptsz"),
      launch_ex("cuLaunchKernelEx"),
      launch_ex("cuLaunchKernelEx_ptsz"),
      graph_launch("cuGraphLaunch"),
      graph_launch("cuGraphLaunch_ptsz"),
      alloc("cuMemAlloc_v2", MemoryEffect::kDeviceAlloc),
      alloc("cuMemAllocAsync", MemoryEffect::kDeviceAlloc, {stream_rdx}),
      alloc("cuMemAllocAsync_ptsz", MemoryEffect::kDeviceAlloc, {stream_rdx}),
      alloc("cuMemAllocFromPoolAsync", MemoryEffect::kDeviceAlloc,
            {{"pool", kRdx, ArgFormat::kPointer}, stream_rcx}),
      alloc("cuMemAllocFromPoolAsync_ptsz", MemoryEffect::kDeviceAlloc,
            {{"pool", kRdx, ArgFormat::kPointer}, stream_rcx}),
      alloc("cuMemAllocManaged", MemoryEffect::kDeviceAlloc, {{"flags", kRdx, ArgFormat::kUInt32}}),
      // Pitched: WidthInBytes x Height asked for; the pitch padding the driver adds (written
      // through pPitch) is not counted.
      {.symbol = "cuMemAllocPitch_v2",
       .layer = Layer::kDriver,
       .api_class = ApiClass::kAlloc,
       .args = {{"dptr", kRdi, ArgFormat::kOutPointer},
                {"pPitch", kRsi, ArgFormat::kPointer},
                {"WidthInBytes", kRdx, ArgFormat::kSize},
                {"Height", kRcx, ArgFormat::kSize},
                {"ElementSizeBytes", kR8, ArgFormat::kUInt32}},
       .bytes_slot = kRdx,
       .out_slot = kRdi,
       .memory = MemoryEffect::kDeviceAlloc,
       .bytes_times = {kRcx, kNoSlot}},
      alloc("cuMemAllocHost_v2", MemoryEffect::kHostAlloc),
      alloc("cuMemHostAlloc", MemoryEffect::kHostAlloc, {{"Flags", kRdx, ArgFormat::kUInt32}}),
      free_("cuMemFree_v2", MemoryEffect::kDeviceFree),
      free_("cuMemFreeAsync", MemoryEffect::kDeviceFree, {{"hStream", kRsi, ArgFormat::kPointer}}),
      free_("cuMemFreeAsync_ptsz", MemoryEffect::kDeviceFree,
            {{"hStream", kRsi, ArgFormat::kPointer}}),
      free_("cuMemFreeHost", MemoryEffect::kHostFree),
      // The virtual memory API (NCCL, PyTorch's expandable segments): physical memory is
      // created and released by handle, then mapped into reserved address ranges. Outstanding
      // device memory counts the handles; a mapping moves no memory of its own.
      {.symbol = "cuMemCreate",
       .layer = Layer::kDriver,
       .api_class = ApiClass::kAlloc,
       .args = {{"handle", kRdi, ArgFormat::kOutPointer},
                {"size", kRsi, ArgFormat::kSize},
                {"prop", kRdx, ArgFormat::kPointer},
                {"flags", kRcx, ArgFormat::kUInt32}},
       .bytes_slot = kRsi,
       .out_slot = kRdi,
       .memory = MemoryEffect::kDeviceAlloc},
      {.symbol = "cuMemRelease",
       .layer = Layer::kDriver,
       .api_class = ApiClass::kFree,
       .args = {{"handle", kRdi, ArgFormat::kPointer}},
       .memory = MemoryEffect::kDeviceFree,
       .memory_ptr_slot = kRdi},
      {.symbol = "cuMemMap",
       .layer = Layer::kDriver,
       .args = {{"ptr", kRdi, ArgFormat::kPointer},
                {"size", kRsi, ArgFormat::kSize},
                {"offset", kRdx, ArgFormat::kSize},
                {"handle", kRcx, ArgFormat::kPointer}},
       .bytes_slot = kRsi},
      {.symbol = "cuMemUnmap",
       .layer = Layer::kDriver,
       .args = {{"ptr", kRdi, ArgFormat::kPointer}, {"size", kRsi, ArgFormat::kSize}},
       .bytes_slot = kRsi},
      copy("cuMemcpy", false),
      copy("cuMemcpy_ptds", false),
      copy("cuMemcpyAsync", true),
      copy("cuMemcpyAsync_ptsz", true),
      copy("cuMemcpyHtoD_v2", false),
      copy("cuMemcpyHtoD_v2_ptds", false),
      copy("cuMemcpyDtoH_v2", false),
      copy("cuMemcpyDtoH_v2_ptds", false),
      copy("cuMemcpyDtoD_v2", false),
      copy("cuMemcpyDtoD_v2_ptds", false),
      copy("cuMemcpyHtoDAsync_v2", true),
      copy("cuMemcpyHtoDAsync_v2_ptsz", true),
      copy("cuMemcpyDtoHAsync_v2", true),
      copy("cuMemcpyDtoHAsync_v2_ptsz", true),
      copy("cuMemcpyDtoDAsync_v2", true),
      copy("cuMemcpyDtoDAsync_v2_ptsz", true),
      copy_peer("cuMemcpyPeer", false),
      copy_peer("cuMemcpyPeer_ptds", false),
      copy_peer("cuMemcpyPeerAsync", true),
      copy_peer("cuMemcpyPeerAsync_ptsz", true),
      copy_nd("cuMemcpy2D_v2", 2, false),
      copy_nd("cuMemcpy2D_v2_ptds", 2, false),
      copy_nd("cuMemcpy2DUnaligned_v2", 2, false),
      copy_nd("cuMemcpy2DUnaligned_v2_ptds", 2, false),
      copy_nd("cuMemcpy2DAsync_v2", 2, true),
      copy_nd("cuMemcpy2DAsync_v2_ptsz", 2, true),
      copy_nd("cuMemcpy3D_v2", 3, false),
      copy_nd("cuMemcpy3D_v2_ptds", 3, false),
      copy_nd("cuMemcpy3DAsync_v2", 3, true),
      copy_nd("cuMemcpy3DAsync_v2_ptsz", 3, true),
      set("cuMemsetD8_v2", 1, false),
      set("cuMemsetD8_v2_ptds", 1, false),
      set("cuMemsetD16_v2", 2, false),
      set("cuMemsetD16_v2_ptds", 2, false),
      set("cuMemsetD32_v2", 4, false),
      set("cuMemsetD32_v2_ptds", 4, false),
      set("cuMemsetD8Async", 1, true),
      set("cuMemsetD8Async_ptsz", 1, true),
      set("cuMemsetD16Async", 2, true),
      set("cuMemsetD16Async_ptsz", 2, true),
      set("cuMemsetD32Async", 4, true),
      set("cuMemsetD32Async_ptsz", 4, true),
      sync_on("cuStreamSynchronize", "hStream"),
      sync_on("cuStreamSynchronize_ptsz", "hStream"),
      {.symbol = "cuCtxSynchronize",
       .layer = Layer::kDriver,
       .api_class = ApiClass::kSync,
       .args = {}},
      sync_on("cuEventSynchronize", "hEvent"),
      {.symbol = "cuStreamWaitEvent",
       .layer = Layer::kDriver,
       .api_class = ApiClass::kSync,
       .args = {{"hStream", kRdi, ArgFormat::kPointer},
                {"hEvent", kRsi, ArgFormat::kPointer},
                {"Flags", kRdx, ArgFormat::kUInt32}}},
      {.symbol = "cuStreamWaitEvent_ptsz",
       .layer = Layer::kDriver,
       .api_class = ApiClass::kSync,
       .args = {{"hStream", kRdi, ArgFormat::kPointer},
                {"hEvent", kRsi, ArgFormat::kPointer},
                {"Flags", kRdx, ArgFormat::kUInt32}}},
      // Kernel names: a launch names its kernel by a handle these calls gave a name.
      load("cuModuleLoad", "module", "fname", ArgFormat::kCString),
      load("cuModuleLoadData", "module", "image", ArgFormat::kPointer),
      load("cuModuleLoadDataEx", "module", "image", ArgFormat::kPointer),
      load("cuModuleLoadFatBinary", "module", "fatCubin", ArgFormat::kPointer),
      load("cuLibraryLoadData", "library", "code", ArgFormat::kPointer),
      load("cuLibraryLoadFromFile", "library", "fileName", ArgFormat::kCString),
      get_named("cuModuleGetFunction", "hfunc", "hmod"),
      get_named("cuLibraryGetKernel", "pKernel", "library"),
      {.symbol = "cuKernelGetFunction",
       .layer = Layer::kDriver,
       .args = {{"pFunc", kRdi, ArgFormat::kOutPointer}, {"kernel", kRsi, ArgFormat::kPointer}},
       .out_slot = kRdi,
       .alias_slot = kRsi},
      // Appended, so that the rows above keep their numbers (tests/fuzz seeds name rows).
      // Setting the GPU up: the driver's own start, and a context's creation.
      {.symbol = "cuInit",
       .layer = Layer::kDriver,
       .args = {{"Flags", kRdi, ArgFormat::kUInt32}},
       .role = CallRole::kSetUp},
      {.symbol = "cuDevicePrimaryCtxRetain",
       .layer = Layer::kDriver,
       .args = {{"dev", kRsi, ArgFormat::kInt}},
       .role = CallRole::kSetUp},
      {.symbol = "cuCtxCreate_v2",
       .layer = Layer::kDriver,
       .args = {{"flags", kRsi, ArgFormat::kUInt32}, {"dev", kRdx, ArgFormat::kInt}},
       .role = CallRole::kSetUp},
      {.symbol = "cuCtxCreate_v3",
       .layer = Layer::kDriver,
       .args = {{"flags", kRcx, ArgFormat::kUInt32}, {"dev", kR8, ArgFormat::kInt}},
       .role = CallRole::kSetUp},
      {.symbol = "cuCtxCreate_v4",
       .layer = Layer::kDriver,
       .args = {{"flags", kRdx, ArgFormat::kUInt32}, {"dev", kRcx, ArgFormat::kInt}},
       .role = CallRole::kSetUp},
  };
  return table;
}

constexpr std::string_view kNcclResults[] = {
    "ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
    "ncclInvalidArgument", "ncclInvalidUsage",       "ncclRemoteError", "ncclInProgress"};

// ncclDataType_t values 0..11 from nccl.h, with their sizes.
constexpr std::pair<std::string_view, uint64_t> kNcclTypes[] = {
    {"ncclInt8", 1},    {"ncclUint8", 1},    {"ncclInt32", 4},      {"ncclUint32", 4},
    {"ncclInt64", 8},   {"ncclUint64", 8},   {"ncclFloat16", 2},    {"ncclFloat32", 4},
    {"ncclFloat64", 8}, {"ncclBfloat16", 2}, {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1}};

constexpr std::string_view kNcclOps[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};

constexpr std::pair<int64_t, std::string_view> kCudaErrors[] = {
    // Values of enum cudaError from the CUDA runtime's driver_types.h.
    {0, "cudaSuccess"},
    {1, "cudaErrorInvalidValue"},
    {2, "cudaErrorMemoryAllocation"},
    {3, "cudaErrorInitializationError"},
    {4, "cudaErrorCudartUnloading"},
    {5, "cudaErrorProfilerDisabled"},
    {6, "cudaErrorProfilerNotInitialized"},
    {7, "cudaErrorProfilerAlreadyStarted"},
    {8, "cudaErrorProfilerAlreadyStopped"},
    {9, "cudaErrorInvalidConfiguration"},
    {12, "cudaErrorInvalidPitchValue"},
    {13, "cudaErrorInvalidSymbol"},
    {16, "cudaErrorInvalidHostPointer"},
    {17, "cudaErrorInvalidDevicePointer"},
    {18, "cudaErrorInvalidTexture"},
    {19, "cudaErrorInvalidTextureBinding"},
    {20, "cudaErrorInvalidChannelDescriptor"},
    {21, "cudaErrorInvalidMemcpyDirection"},
    {22, "cudaErrorAddressOfConstant"},
    {23, "cudaErrorTextureFetchFailed"},
    {24, "cudaErrorTextureNotBound"},
    {25, "cudaErrorSynchronizationError"},
    {26, "cudaErrorInvalidFilterSetting"},
    {27, "cudaErrorInvalidNormSetting"},
    {28, "cudaErrorMixedDeviceExecution"},
    {31, "cudaErrorNotYetImplemented"},
    {32, "cudaErrorMemoryValueTooLarge"},
    {34, "cudaErrorStubLibrary"},
    {35, "cudaErrorInsufficientDriver"},
    {36, "cudaErrorCallRequiresNewerDriver"},
    {37, "cudaErrorInvalidSurface"},
    {43, "cudaErrorDuplicateVariableName"},
    {44, "cudaErrorDuplicateTextureName"},
    {45, "cudaErrorDuplicateSurfaceName"},
    {46, "cudaErrorDevicesUnavailable"},
    {49, "cudaErrorIncompatibleDriverContext"},
    {52, "cudaErrorMissingConfiguration"},
    {53, "cudaErrorPriorLaunchFailure"},
    {65, "cudaErrorLaunchMaxDepthExceeded"},
    {66, "cudaErrorLaunchFileScopedTex"},
    {67, "cudaErrorLaunchFileScopedSurf"},
    {68, "cudaErrorSyncDepthExceeded"},
    {69, "cudaErrorLaunchPendingCountExceeded"},
    {98, "cudaErrorInvalidDeviceFunction"},
    {100, "cudaErrorNoDevice"},
    {101, "cudaErrorInvalidDevice"},
    {102, "cudaErrorDeviceNotLicensed"},
    {103, "cudaErrorSoftwareValidityNotEstablished"},
    {127, "cudaErrorStartupFailure"},
    {200, "cudaErrorInvalidKernelImage"},
    {201, "cudaErrorDeviceUninitialized"},
    {205, "cudaErrorMapBufferObjectFailed"},
    {206, "cudaErrorUnmapBufferObjectFailed"},
    {207, "cudaErrorArrayIsMapped"},
    {208, "cudaErrorAlreadyMapped"},
    {209, "cudaErrorNoKernelImageForDevice"},
    {210, "cudaErrorAlreadyAcquired"},
    {211, "cudaErrorNotMapped"},
    {212, "cudaErrorNotMappedAsArray"},
    {213, "cudaErrorNotMappedAsPointer"},
    {214, "cudaErrorECCUncorrectable"},
    {215, "cudaErrorUnsupportedLimit"},
    {216, "cudaErrorDeviceAlreadyInUse"},
    {217, "cudaErrorPeerAccessUnsupported"},
    {218, "cudaErrorInvalidPtx"},
    {219, "cudaErrorInvalidGraphicsContext"},
    {220, "cudaErrorNvlinkUncorrectable"},
    {221, "cudaErrorJitCompilerNotFound"},
    {222, "cudaErrorUnsupportedPtxVersion"},
    {223, "cudaErrorJitCompilationDisabled"},
    {224, "cudaErrorUnsupportedExecAffinity"},
    {225, "cudaErrorUnsupportedDevSideSync"},
    {226, "cudaErrorContained"},
    {300, "cudaErrorInvalidSource"},
    {301, "cudaErrorFileNotFound"},
    {302, "cudaErrorSharedObjectSymbolNotFound"},
    {303, "cudaErrorSharedObjectInitFailed"},
    {304, "cudaErrorOperatingSystem"},
    {400, "cudaErrorInvalidResourceHandle"},
    {401, "cudaErrorIllegalState"},
    {402, "cudaErrorLossyQuery"},
    {500, "cudaErrorSymbolNotFound"},
    {600, "cudaErrorNotReady"},
    {700, "cudaErrorIllegalAddress"},
    {701, "cudaErrorLaunchOutOfResources"},
    {702, "cudaErrorLaunchTimeout"},
    {703, "cudaErrorLaunchIncompatibleTexturing"},
    {704, "cudaErrorPeerAccessAlreadyEnabled"},
    {705, "cudaErrorPeerAccessNotEnabled"},
    {708, "cudaErrorSetOnActiveProcess"},
    {709, "cudaErrorContextIsDestroyed"},
    {710, "cudaErrorAssert"},
    {711, "cudaErrorTooManyPeers"},
    {712, "cudaErrorHostMemoryAlreadyRegistered"},
    {713, "cudaErrorHostMemoryNotRegistered"},
    {714, "cudaErrorHardwareStackError"},
    {715, "cudaErrorIllegalInstruction"},
    {716, "cudaErrorMisalignedAddress"},
    {717, "cudaErrorInvalidAddressSpace"},
    {718, "cudaErrorInvalidPc"},
    {719, "cudaErrorLaunchFailure"},
    {720, "cudaErrorCooperativeLaunchTooLarge"},
    {721, "cudaErrorTensorMemoryLeak"},
    {800, "cudaErrorNotPermitted"},
    {801, "cudaErrorNotSupported"},
    {802, "cudaErrorSystemNotReady"},
    {803, "cudaErrorSystemDriverMismatch"},
    {804, "cudaErrorCompatNotSupportedOnDevice"},
    {805, "cudaErrorMpsConnectionFailed"},
    {806, "cudaErrorMpsRpcFailure"},
    {807, "cudaErrorMpsServerNotReady"},
    {808, "cudaErrorMpsMaxClientsReached"},
    {809, "cudaErrorMpsMaxConnectionsReached"},
    {810, "cudaErrorMpsClientTerminated"},
    {811, "cudaErrorCdpNotSupported"},
    {812, "cudaErrorCdpVersionMismatch"},
    {900, "cudaErrorStreamCaptureUnsupported"},
    {901, "cudaErrorStreamCaptureInvalidated"},
    {902, "cudaErrorStreamCaptureMerge"},
    {903, "cudaErrorStreamCaptureUnmatched"},
    {904, "cudaErrorStreamCaptureUnjoined"},
    {905, "cudaErrorStreamCaptureIsolation"},
    {906, "cudaErrorStreamCaptureImplicit"},
    {907, "cudaErrorCapturedEvent"},
    {908, "cudaErrorStreamCaptureWrongThread"},
    {909, "cudaErrorTimeout"},
    {910, "cudaErrorGraphExecUpdateFailure"},
    {911, "cudaErrorExternalDevice"},
    {912, "cudaErrorInvalidClusterSize"},
    {913, "cudaErrorFunctionNotLoaded"},
    {914, "cudaErrorInvalidResourceType"},
    {915, "cudaErrorInvalidResourceConfiguration"},
    {999, "cudaErrorUnknown"},
};

constexpr std::pair<int64_t, std::string_view> kCuResults[] = {
    // Values of enum cudaError_enum (CUresult) from the CUDA driver's cuda.h.
    {0, "CUDA_SUCCESS"},
    {1, "CUDA_ERROR_INVALID_VALUE"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY"},
    {3, "CUDA_ERROR_NOT_INITIALIZED"},
    {4, "CUDA_ERROR_DEINITIALIZED"},
    {5, "CUDA_ERROR_PROFILER_DISABLED"},
    {6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED"},
    {7, "CUDA_ERROR_PROFILER_ALREADY_STARTED"},
    {8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED"},
    {34, "CUDA_ERROR_STUB_LIBRARY"},
    {36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE"},
    {100, "CUDA_ERROR_NO_DEVICE"},
    {101, "CUDA_ERROR_INVALID_DEVICE"},
    {102, "CUDA_ERROR_DEVICE_NOT_LICENSED"},
    {200, "CUDA_ERROR_INVALID_IMAGE"},
    {201, "CUDA_ERROR_INVALID_CONTEXT"},
    {202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT"},
    {205, "CUDA_ERROR_MAP_FAILED"},
    {206, "CUDA_ERROR_UNMAP_FAILED"},
    {207, "CUDA_ERROR_ARRAY_IS_MAPPED"},
    {208, "CUDA_ERROR_ALREADY_MAPPED"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
    {210, "CUDA_ERROR_ALREADY_ACQUIRED"},
    {211, "CUDA_ERROR_NOT_MAPPED"},
    {212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY"},
    {213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER"},
    {214, "CUDA_ERROR_ECC_UNCORRECTABLE"},
    {215, "CUDA_ERROR_UNSUPPORTED_LIMIT"},
    {216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"},
    {218, "CUDA_ERROR_INVALID_PTX"},
    {219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT"},
    {220, "CUDA_ERROR_NVLINK_UNCORRECTABLE"},
    {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
    {223, "CUDA_ERROR_JIT_COMPILATION_DISABLED"},
    {224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY"},
    {225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC"},
    {226, "CUDA_ERROR_CONTAINED"},
    {300, "CUDA_ERROR_INVALID_SOURCE"},
    {301, "CUDA_ERROR_FILE_NOT_FOUND"},
    {302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND"},
    {303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM"},
    {400, "CUDA_ERROR_INVALID_HANDLE"},
    {401, "CUDA_ERROR_ILLEGAL_STATE"},
    {402, "CUDA_ERROR_LOSSY_QUERY"},
    {500, "CUDA_ERROR_NOT_FOUND"},
    {600, "CUDA_ERROR_NOT_READY"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT"},
    {703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING"},
    {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"},
    {705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"},
    {708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED"},
    {710, "CUDA_ERROR_ASSERT"},
    {711, "CUDA_ERROR_TOO_MANY_PEERS"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"},
    {714, "CUDA_ERROR_HARDWARE_STACK_ERROR"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS"},
    {717, "CUDA_ERROR_INVALID_ADDRESS_SPACE"},
    {718, "CUDA_ERROR_INVALID_PC"},
    {719, "CUDA_ERROR_LAUNCH_FAILED"},
    {720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"},
    {721, "CUDA_ERROR_TENSOR_MEMORY_LEAK"},
    {800, "CUDA_ERROR_NOT_PERMITTED"},
    {801, "CUDA_ERROR_NOT_SUPPORTED"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"},
    {805, "CUDA_ERROR_MPS_CONNECTION_FAILED"},
    {806, "CUDA_ERROR_MPS_RPC_FAILURE"},
    {807, "CUDA_ERROR_MPS_SERVER_NOT_READY"},
    {808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED"},
    {809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED"},
    {810, "CUDA_ERROR_MPS_CLIENT_TERMINATED"},
    {811, "CUDA_ERROR_CDP_NOT_SUPPORTED"},
    {812, "CUDA_ERROR_CDP_VERSION_MISMATCH"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
    {902, "CUDA_ERROR_STREAM_CAPTURE_MERGE"},
    {903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"},
    {904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"},
    {905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"},
    {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"},
    {907, "CUDA_ERROR_CAPTURED_EVENT"},
    {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"},
    {909, "CUDA_ERROR_TIMEOUT"},
    {910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"},
    {911, "CUDA_ERROR_EXTERNAL_DEVICE"},
    {912, "CUDA_ERROR_INVALID_CLUSTER_SIZE"},
    {913, "CUDA_ERROR_FUNCTION_NOT_LOADED"},
    {914, "CUDA_ERROR_INVALID_RESOURCE_TYPE"},
    {915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION"},
    {916, "CUDA_ERROR_KEY_ROTATION"},
    {999, "CUDA_ERROR_UNKNOWN"},
};

constexpr std::string_view kMemcpyKinds[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice",
                                             "cudaMemcpyDeviceToHost", "cudaMemcpyDeviceToDevice",
                                             "cudaMemcpyDefault"};

std::string dim3_text(uint64_t xy, uint64_t z) {
  return fmt::format("({},{},{})", static_cast<uint32_t>(xy), static_cast<uint32_t>(xy >> 32),
                     static_cast<uint32_t>(z));
}

constexpr LayerLibrary kLayerLibraries[] = {
    {Layer::kCuda, "libcudart.so"},
    {Layer::kDriver, "libcuda.so"},
    {Layer::kNccl, "libnccl.so"},
    // ATen operators' entry points are in libtorch_cpu whatever the device; a libtorch_cuda
    // that exports any is probed too.
    {Layer::kTorch, "libtorch_cpu.so"},
    {Layer::kTorch, "libtorch_cuda.so"},
};

}  // namespace

std::string_view layer_name(Layer layer) {
  switch (layer) {
    case Layer::kCuda:
      return "cuda";
    case Layer::kNccl:
      return "nccl";
    case Layer::kTorch:
      return "torch";
    case Layer::kPython:
      return "python";
    case Layer::kOs:
      return "os";
    case Layer::kGpu:
      return "gpu";
    case Layer::kDriver:
      return "driver";
  }
  return "unknown";
}

std::span<const Layer> all_layers() {
  static constexpr Layer kAll[] = {Layer::kCuda,   Layer::kDriver, Layer::kNccl, Layer::kTorch,
                                   Layer::kPython, Layer::kOs,     Layer::kGpu};
  return kAll;
}

const ProbeSpec* find_probe(Layer layer, std::string_view symbol) {
  for (const ProbeSpec& spec : probe_table(layer)) {
    if (spec.symbol == symbol) return &spec;
  }
  return nullptr;
}

ApiClass api_class(Layer layer, std::string_view symbol) {
  const ProbeSpec* spec = find_probe(layer, symbol);
  return spec ? spec->api_class : ApiClass::kOther;
}

std::optional<Layer> layer_from_name(std::string_view name) {
  for (Layer layer : all_layers()) {
    if (layer_name(layer) == name) return layer;
  }
  return std::nullopt;
}

std::span<const ProbeSpec> probe_table(Layer layer) {
  switch (layer) {
    case Layer::kCuda:
      return cuda_table();
    case Layer::kNccl:
      return nccl_table();
    case Layer::kDriver:
      return driver_table();
    default:
      return {};
  }
}

bool may_duty_cycle(const ProbeSpec& spec) {
  const bool call_layer =
      spec.layer == Layer::kCuda || spec.layer == Layer::kDriver || spec.layer == Layer::kTorch;
  return call_layer && spec.memory == MemoryEffect::kNone && spec.role == CallRole::kPlain &&
         spec.name_slot == kNoSlot && spec.alias_slot == kNoSlot && !spec.emit_entry;
}

uint8_t bpf_row_flags(const ProbeSpec& spec) {
  return (spec.emit_entry ? EACGM_ROW_EMIT_ENTRY : 0) |
         (spec.name_slot != kNoSlot ? EACGM_ROW_NAMES : 0);
}

static_assert(MemoryRead::kStackArgs == EACGM_READ_STACK);
static_assert(kExtra == EACGM_CALL_ARGS && kExtra + 1 == EACGM_CALL_WORDS);

uint32_t bpf_entry_read(const ProbeSpec& spec) {
  if (spec.read) {
    const MemoryRead& r = *spec.read;
    return EACGM_ENTRY_READ(uint32_t{r.words}, uint32_t{r.into}, uint32_t{r.from},
                            uint32_t{r.offset_words});
  }
  // Otherwise the stack words the row's slots use, read from the first one on.
  int last = -1;
  const auto use = [&](Slot slot) {
    if (slot != kNoSlot && slot >= kStack0) last = std::max(last, static_cast<int>(slot));
  };
  // A communicator's 128-byte ncclUniqueId is passed in memory: its first 16
  // bytes, the two stack words, name the communicator across processes.
  if (spec.role == CallRole::kCommInit) use(kStack1);
  for (Slot slot :
       {spec.bytes_slot, spec.dtype_slot, spec.out_slot, spec.memory_ptr_slot, spec.comm_slot,
        spec.rank_slot, spec.nranks_slot, spec.name_slot, spec.name_key_slot, spec.alias_slot,
        spec.kernel_slot, spec.bytes_times[0], spec.bytes_times[1]}) {
    use(slot);
  }
  for (const ArgSpec& arg : spec.args) {
    use(arg.slot);
    // A dim3's later parts are in the slots after its own.
    if (arg.format == ArgFormat::kDim3 || arg.format == ArgFormat::kDim3High) {
      use(static_cast<Slot>(arg.slot + 1));
    }
    if (arg.format == ArgFormat::kDim3Split) use(static_cast<Slot>(arg.slot + 2));
  }
  if (last < 0) return 0;
  const uint32_t words = static_cast<uint32_t>(last - kStack0 + 1);
  return EACGM_ENTRY_READ(words, uint32_t{kStack0}, uint32_t{MemoryRead::kStackArgs}, 0u);
}

uint8_t bpf_name_slots(const ProbeSpec& spec) {
  if (spec.name_slot == kNoSlot) return 0;
  const uint8_t key = spec.name_key_slot == spec.out_slot ? EACGM_NAME_KEY_OUT : spec.name_key_slot;
  return static_cast<uint8_t>(key << 4 | (spec.name_slot & 0xf));
}

bool DecodedArg::is_pointer() const {
  return spec != nullptr &&
         (spec->format == ArgFormat::kPointer || spec->format == ArgFormat::kOutPointer);
}

namespace {

// "0x7f12ab": fmt's "{:#x}", written by hand because every pointer argument of every recorded call
// is formatted, and fmt's format-string parsing cost more than the rest of decoding.
std::string hex_word_text(uint64_t value) {
  char digits[2 + 16];
  digits[0] = '0';
  digits[1] = 'x';
  const auto [end, ec] = std::to_chars(digits + 2, digits + sizeof(digits), value, 16);
  (void)ec;  // 16 hex digits always fit
  return std::string(digits, end);
}

}  // namespace

std::vector<DecodedArg> decode_args(const ProbeSpec& spec, const RawCall& call) {
  std::vector<DecodedArg> out;
  out.reserve(spec.args.size());
  for (const ArgSpec& arg : spec.args) {
    const uint64_t v = call.word(arg.slot);
    DecodedArg d{.name = arg.name,
                 .text = {},
                 .number = std::nullopt,
                 .spec = &arg,
                 .value = arg.format == ArgFormat::kOutPointer ? call.out_value : v};
    switch (arg.format) {
      case ArgFormat::kInt:
        d.number = static_cast<int32_t>(v);
        d.text = std::to_string(*d.number);
        break;
      case ArgFormat::kUInt32:
        d.number = static_cast<uint32_t>(v);
        d.text = std::to_string(*d.number);
        break;
      case ArgFormat::kUInt:
      case ArgFormat::kSize:
        d.number = static_cast<int64_t>(v);
        d.text = std::to_string(v);
        break;
      case ArgFormat::kPointer:
        d.text = hex_word_text(v);
        break;
      case ArgFormat::kOutPointer:
        // What the callee wrote through the pointer, e.g. the new allocation.
        d.text = hex_word_text(call.out_value);
        break;
      case ArgFormat::kMemcpyKind:
        d.text = std::string(memcpy_kind_name(v));
        break;
      case ArgFormat::kDim3:
        d.text = dim3_text(v, call.word(static_cast<Slot>(arg.slot + 1)));
        break;
      case ArgFormat::kDim3High: {
        const uint64_t yz = call.word(static_cast<Slot>(arg.slot + 1));
        d.text = fmt::format("({},{},{})", static_cast<uint32_t>(v >> 32),
                             static_cast<uint32_t>(yz), static_cast<uint32_t>(yz >> 32));
        break;
      }
      case ArgFormat::kDim3Split:
        d.text = fmt::format("({},{},{})", static_cast<uint32_t>(v),
                             static_cast<uint32_t>(call.word(static_cast<Slot>(arg.slot + 1))),
                             static_cast<uint32_t>(call.word(static_cast<Slot>(arg.slot + 2))));
        break;
      case ArgFormat::kCString:
        d.text = hex_word_text(v);
        break;
      case ArgFormat::kNcclDataType:
        d.text = std::string(nccl_type_name(static_cast<uint32_t>(v)));
        break;
      case ArgFormat::kNcclRedOp: {
        const auto op = static_cast<uint32_t>(v);
        // Ops past ncclAvg are user-defined (ncclRedOpCreatePreMulSum).
        d.text =
            op < std::size(kNcclOps) ? std::string(kNcclOps[op]) : fmt::format("custom({})", op);
        break;
      }
    }
    out.push_back(std::move(d));
  }
  return out;
}

uint64_t call_bytes(const ProbeSpec& spec, const RawCall& call) {
  if (spec.bytes_slot == kNoSlot) return 0;
  uint64_t n = call.word(spec.bytes_slot);
  for (Slot times : spec.bytes_times) {
    if (times != kNoSlot) n *= call.word(times);
  }
  if (spec.dtype_slot == kNoSlot) return n * spec.bytes_scale;
  return n * nccl_type_size(static_cast<uint32_t>(call.word(spec.dtype_slot)));
}

uint64_t nccl_type_size(uint64_t datatype) {
  return datatype < std::size(kNcclTypes) ? kNcclTypes[datatype].second : 0;
}

std::string_view nccl_type_name(uint64_t datatype) {
  return datatype < std::size(kNcclTypes) ? kNcclTypes[datatype].first : "ncclUnknownType";
}

std::string_view nccl_result_name(int64_t code) {
  return code >= 0 && code < static_cast<int64_t>(std::size(kNcclResults)) ? kNcclResults[code]
                                                                           : "ncclUnknownResult";
}

std::string status_name(Layer layer, int64_t code) {
  switch (layer) {
    case Layer::kCuda:
      return std::string(cuda_error_name(code));
    case Layer::kNccl:
      return std::string(nccl_result_name(code));
    case Layer::kDriver:
      return std::string(cu_result_name(code));
    default:
      return std::to_string(code);
  }
}

std::string_view cuda_error_name(int64_t code) {
  auto it = std::lower_bound(std::begin(kCudaErrors), std::end(kCudaErrors), code,
                             [](const auto& e, int64_t c) { return e.first < c; });
  if (it != std::end(kCudaErrors) && it->first == code) return it->second;
  return "cudaErrorUnknownCode";
}

std::string_view cu_result_name(int64_t code) {
  auto it = std::lower_bound(std::begin(kCuResults), std::end(kCuResults), code,
                             [](const auto& e, int64_t c) { return e.first < c; });
  if (it != std::end(kCuResults) && it->first == code) return it->second;
  return "CUDA_ERROR_UNKNOWN_CODE";
}

std::string_view memcpy_kind_name(uint64_t kind) {
  return kind < std::size(kMemcpyKinds) ? kMemcpyKinds[kind] : "cudaMemcpyInvalidKind";
}

std::span<const LayerLibrary> layer_libraries() { return kLayerLibraries; }

std::optional<Layer> library_layer(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  for (const LayerLibrary& lib : kLayerLibraries) {
    if (base.starts_with(lib.file_prefix)) return lib.layer;
  }
  return std::nullopt;
}

bool is_unwinder_library(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  return base.starts_with("libgcc_s.so") || base.starts_with("libunwind.so");
}

}  // namespace eacgm
