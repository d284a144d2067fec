// The bench's bpftool-generated skeletons, through the same warning pragmas as
// src/probes/skeletons.h.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wpedantic"
#include "bare_probe.skel.h"
#include "handler_steps.skel.h"
#pragma GCC diagnostic pop
