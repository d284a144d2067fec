// The part of NVIDIA's NVML C API that eacgm uses, declared here from NVIDIA's
// public NVML API reference (docs.nvidia.com/deploy/nvml-api): types, struct
// layouts, constants and function signatures. No NVIDIA header is needed at
// build time, and libnvidia-ml.so.1 is opened with dlopen() at run time, so
// eacgm builds and runs on machines without the driver.
//
// Only facts are here; which function is resolved under which name (the _v2,
// _v3 variants) is decided in nvml_library.cpp.
#pragma once

#include <cstdint>

namespace eacgm::nvml {

// nvmlReturn_t: a C enum, int-sized.
using Return = int;
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorUnknown = 999;

// Opaque handles: pointers to structs the library owns.
struct DeviceSt;
using Device = DeviceSt*;  // nvmlDevice_t
struct EventSetSt;
using EventSet = EventSetSt*;  // nvmlEventSet_t

// Buffer sizes the reference documents for the string getters.
inline constexpr unsigned kSystemDriverVersionBufferSize = 80;
inline constexpr unsigned kSystemNvmlVersionBufferSize = 80;
inline constexpr unsigned kDeviceNameV2BufferSize = 96;
inline constexpr unsigned kDeviceUuidV2BufferSize = 96;

// nvmlUtilization_t: percent of the last sample period the GPU (kernels) and
// its memory (reads or writes) were busy.
struct Utilization {
  unsigned int gpu;
  unsigned int memory;
};

// nvmlMemory_t (the v1 struct of nvmlDeviceGetMemoryInfo), bytes.
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlProcessInfo_v1_t, filled by nvmlDeviceGetComputeRunningProcesses.
struct ProcessInfoV1 {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // bytes, or kValueNotAvailable
};

// nvmlProcessInfo_t (= nvmlProcessInfo_v2_t), filled by the _v2 and _v3
// variants of nvmlDeviceGetComputeRunningProcesses.
struct ProcessInfo {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // bytes, or kValueNotAvailable
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// NVML_VALUE_NOT_AVAILABLE: what usedGpuMemory holds when the driver cannot tell.
inline constexpr unsigned long long kValueNotAvailable = ~0ull;

// nvmlProcessUtilizationSample_t, filled by nvmlDeviceGetProcessUtilization.
struct ProcessUtilizationSample {
  unsigned int pid;
  unsigned long long timeStamp;  // CPU timestamp in microseconds
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};

// nvmlEventData_t as nvmlEventSetWait_v2 fills it.
struct EventData {
  Device device;
  unsigned long long eventType;
  unsigned long long eventData;  // the XID for kEventTypeXidCriticalError, else 0
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// The older nvmlEventData_t that nvmlEventSetWait (no suffix) fills.
struct EventDataV1 {
  Device device;
  unsigned long long eventType;
  unsigned long long eventData;
};

static_assert(sizeof(Utilization) == 8);
static_assert(sizeof(Memory) == 24);
static_assert(sizeof(ProcessInfoV1) == 16);
static_assert(sizeof(ProcessInfo) == 24);
static_assert(sizeof(ProcessUtilizationSample) == 32);
static_assert(sizeof(EventData) == 32);
static_assert(sizeof(EventDataV1) == 24);

// nvmlTemperatureSensors_t
inline constexpr int kTemperatureGpu = 0;
// nvmlClockType_t
inline constexpr int kClockGraphics = 0;
inline constexpr int kClockSm = 1;
inline constexpr int kClockMem = 2;
// nvmlPcieUtilCounter_t (values in KB/s)
inline constexpr int kPcieUtilTxBytes = 0;
inline constexpr int kPcieUtilRxBytes = 1;
// nvmlMemoryErrorType_t
inline constexpr int kMemoryErrorTypeCorrected = 0;
inline constexpr int kMemoryErrorTypeUncorrected = 1;
// nvmlEccCounterType_t: volatile counts reset at driver load.
inline constexpr int kVolatileEcc = 0;

// nvmlEventType* bits.
inline constexpr unsigned long long kEventTypeSingleBitEccError = 0x1;
inline constexpr unsigned long long kEventTypeDoubleBitEccError = 0x2;
inline constexpr unsigned long long kEventTypeXidCriticalError = 0x8;

// nvmlClocksEventReason* bits (the same values as the older
// nvmlClocksThrottleReason* names).
inline constexpr unsigned long long kClocksEventReasonGpuIdle = 0x1;
inline constexpr unsigned long long kClocksEventReasonApplicationsClocksSetting = 0x2;
inline constexpr unsigned long long kClocksEventReasonSwPowerCap = 0x4;
inline constexpr unsigned long long kClocksEventReasonHwSlowdown = 0x8;
inline constexpr unsigned long long kClocksEventReasonSyncBoost = 0x10;
inline constexpr unsigned long long kClocksEventReasonSwThermalSlowdown = 0x20;
inline constexpr unsigned long long kClocksEventReasonHwThermalSlowdown = 0x40;
inline constexpr unsigned long long kClocksEventReasonHwPowerBrakeSlowdown = 0x80;
inline constexpr unsigned long long kClocksEventReasonDisplayClockSetting = 0x100;

// Function signatures.
using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return);
using SystemGetStringFn = Return (*)(char* buffer, unsigned int length);
using DeviceGetCountFn = Return (*)(unsigned int* count);
using DeviceGetHandleByIndexFn = Return (*)(unsigned int index, Device* device);
using DeviceGetStringFn = Return (*)(Device device, char* buffer, unsigned int length);
using DeviceGetUtilizationRatesFn = Return (*)(Device device, Utilization* utilization);
using DeviceGetMemoryInfoFn = Return (*)(Device device, Memory* memory);
using DeviceGetTemperatureFn = Return (*)(Device device, int sensor, unsigned int* celsius);
using DeviceGetUIntFn = Return (*)(Device device, unsigned int* value);  // power, limit, fan
using DeviceGetClockInfoFn = Return (*)(Device device, int clock_type, unsigned int* mhz);
using DeviceGetPcieThroughputFn = Return (*)(Device device, int counter, unsigned int* kb_per_s);
using DeviceGetClockReasonsFn = Return (*)(Device device, unsigned long long* reasons);
using DeviceGetTotalEccErrorsFn = Return (*)(Device device, int error_type, int counter_type,
                                             unsigned long long* count);
// `infos` points to ProcessInfo (_v2, _v3) or ProcessInfoV1 (no suffix).
using DeviceGetComputeRunningProcessesFn = Return (*)(Device device, unsigned int* count,
                                                      void* infos);
using DeviceGetProcessUtilizationFn = Return (*)(Device device, ProcessUtilizationSample* samples,
                                                 unsigned int* count,
                                                 unsigned long long last_seen_us);
using DeviceGetSupportedEventTypesFn = Return (*)(Device device, unsigned long long* types);
using EventSetCreateFn = Return (*)(EventSet* set);
using DeviceRegisterEventsFn = Return (*)(Device device, unsigned long long types, EventSet set);
// `data` points to EventData (_v2) or EventDataV1 (no suffix).
using EventSetWaitFn = Return (*)(EventSet set, void* data, unsigned int timeout_ms);
using EventSetFreeFn = Return (*)(EventSet set);

}  // namespace eacgm::nvml
