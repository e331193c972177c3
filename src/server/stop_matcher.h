// server/stop_matcher.h — stop strings matched on decoded text across token boundaries. Text that
// might be the start of a stop string is held back until it is decided; the stop string itself and
// everything after it are never emitted.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rill::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops = {});
  /// Feeds decoded text; returns the part that is now safe to emit. After a match, returns the
  /// text before the stop string and stopped() turns true; later calls return "".
  std::string push(std::string_view text);
  /// At the end of generation: whatever is still held back (never part of a stop string).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  ///< the stop string that matched

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace rill::server
