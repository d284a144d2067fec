// The bounds of every numeric flag, checked by one validator. CLI11's own checks let NaN through
// (every comparison with it is false), accept a second count of 1e308 (which becomes an
// undefined conversion to nanoseconds), and print their limits with %f, so that
// `--hang-timeout -1` answered with a 309-digit number. Here a value must be a finite number
// within documented limits, and the message says which, in the flag's unit.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace eacgm {

// Accepts a finite number from `lo` to `hi` (inclusive). `unit` follows the bounds in the
// message and in --help: "seconds", "milliseconds (1 ms to 1 hour)".
CLI::Validator bounded(double lo, double hi, const std::string& unit);

// --overhead-budget: a percentage above 0 and at most 100, written `1%` or `1`; the value the
// option receives is the number (1). A transform, not a check: it rewrites the text.
CLI::Validator overhead_budget_percent();
// --torch-ops: default, all, or a regular expression over operator names (TorchOpFilter::parse),
// checked while the command line is read, the same for record, attach and serve.
CLI::Validator torch_ops_filter();
inline constexpr const char* kTorchOpsHelp =
    "torch layer: operators to trace: default (the costly ones), all, or a regular expression "
    "matching aten::OP.OVERLOAD, OP.OVERLOAD or OP whole";

// The limits of --overhead-budget, in percent. Below a hundredth of a percent an on-phase of two
// seconds would need an off-phase of hours: no detector would see the job in time.
inline constexpr double kMinOverheadBudgetPct = 0.01;
inline constexpr double kMaxOverheadBudgetPct = 100;

// The limits of the flags record, attach and serve share, documented in the README.
inline constexpr double kMinHangTimeoutS = 0.1;
inline constexpr double kMaxHangTimeoutS = 86400;  // a day: no collective legitimately waits longer
inline constexpr double kMinGpuRateHz = 0.1;
inline constexpr double kMaxGpuRateHz = 1000;

}  // namespace eacgm
