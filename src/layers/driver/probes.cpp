#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "layers/driver/info.h"
#include "probes/probe_table.h"

namespace eacgm {
namespace {
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

}  // namespace

std::span<const ProbeSpec> driver_rows() { return driver_table(); }

std::string_view cu_result_name(int64_t code) {
  auto it = std::lower_bound(std::begin(kCuResults), std::end(kCuResults), code,
                             [](const auto& e, int64_t c) { return e.first < c; });
  if (it != std::end(kCuResults) && it->first == code) return it->second;
  return "CUDA_ERROR_UNKNOWN_CODE";
}

}  // namespace eacgm
