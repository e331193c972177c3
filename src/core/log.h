// core/log.h — the one global of rill: its logger (spdlog, to stderr).
#pragma once

#include <spdlog/spdlog.h>

namespace rill {

/// The process-wide logger ("rill"), writing to stderr.
spdlog::logger& logger();

/// Sets the level by name: trace, debug, info, warn, error, off.
void set_log_level(const std::string& level);

}  // namespace rill
