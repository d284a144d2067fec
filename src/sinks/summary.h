// summary.json (the contract in docs/SUMMARY_JSON.md: extend freely, never break) and
// the human-readable report printed at the end of a session.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/result.h"
#include "session/session.h"

namespace eacgm {

nlohmann::json summary_json(const Session& session);
// One anomaly as summary.json's "anomalies" hold it (also eacgm analyze's report).
nlohmann::json anomaly_json(const Anomaly& anomaly);
// Written to a temporary file and renamed, so a reader never sees half a summary.
Result<void> write_summary(const Session& session, const std::string& path);
// Allocates room for the summary at `path` now (its temporary file's blocks, up to 1 MiB), so
// that a disk that fills up while a session records still has room for the summary that says
// what was lost. Best effort: write_summary() works without it.
void reserve_summary(const std::string& path);
// "8123 of its 12000 calls are missing (inserting a call into ...: database or disk is full)".
std::string describe_loss(const OutputLoss& loss);
std::string text_report(const Session& session);

}  // namespace eacgm
