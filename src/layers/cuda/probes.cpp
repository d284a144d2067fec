#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "layers/cuda/info.h"
#include "probes/probe_table.h"

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

}  // namespace

std::span<const ProbeSpec> cuda_rows() { return cuda_table(); }

std::string_view cuda_error_name(int64_t code) {
  auto it = std::lower_bound(std::begin(kCudaErrors), std::end(kCudaErrors), code,
                             [](const auto& e, int64_t c) { return e.first < c; });
  if (it != std::end(kCudaErrors) && it->first == code) return it->second;
  return "cudaErrorUnknownCode";
}

}  // namespace eacgm
