#pragma once

namespace eacgm {

// `eacgm doctor`: can this machine trace, and what would each layer trace?
// Returns 0 when tracing can work, 1 when something essential is missing.
int run_doctor();

}  // namespace eacgm
