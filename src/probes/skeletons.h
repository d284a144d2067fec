// The bpftool-generated skeletons are C; include them through this header so
// their few C-isms don't trip our warning flags.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wpedantic"
#include "core.skel.h"
#include "cuda.skel.h"
#include "driver.skel.h"
#include "nccl.skel.h"
#include "os.skel.h"
#include "python.skel.h"
#include "torch.skel.h"
#pragma GCC diagnostic pop
