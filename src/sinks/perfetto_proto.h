// The generated Perfetto protobuf classes (proto/perfetto_trace.proto), wherever the build put
// them: protoc's output directory is on the include path, and a build that generates under
// proto/ works as well. One place for the writers and their tests to include.
#pragma once

#if __has_include("proto/perfetto_trace.pb.h")
#include "proto/perfetto_trace.pb.h"
#else
#include "perfetto_trace.pb.h"
#endif
