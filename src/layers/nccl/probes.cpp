#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "layers/nccl/info.h"
#include "probes/probe_table.h"

namespace eacgm {
namespace {
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

constexpr std::string_view kNcclResults[] = {
    "ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
    "ncclInvalidArgument", "ncclInvalidUsage",       "ncclRemoteError", "ncclInProgress"};

}  // namespace

std::span<const ProbeSpec> nccl_rows() { return nccl_table(); }

std::string_view nccl_result_name(int64_t code) {
  return code >= 0 && code < static_cast<int64_t>(std::size(kNcclResults)) ? kNcclResults[code]
                                                                           : "ncclUnknownResult";
}

}  // namespace eacgm
