// tests/common/log_capture.h — LogCapture: rill's logger also writes into a string while it lives, at the
// level given; the sink and the level are restored when it goes, however the test leaves its scope.
#pragma once

#include <spdlog/sinks/ostream_sink.h>

#include <memory>
#include <sstream>
#include <string>

#include "core/log.h"

namespace rill::test {

class LogCapture {
 public:
  explicit LogCapture(spdlog::level::level_enum level)
      : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)), level_(logger().level()) {
    logger().sinks().push_back(sink_);
    logger().set_level(level);
  }
  ~LogCapture() {
    auto& sinks = logger().sinks();
    for (auto it = sinks.begin(); it != sinks.end(); ++it)
      if (*it == sink_) {
        sinks.erase(it);
        break;
      }
    logger().set_level(level_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  spdlog::level::level_enum level_;
};

}  // namespace rill::test
