// text/jinja/error.h — the two error types of the template engine. Both are rill::Error, so
// callers need not know them; the evaluator uses them to add the template line exactly once
// and to leave a template's own raise_exception() message untouched.
#pragma once

#include <string>

#include "core/error.h"

namespace rill::text::jinja {

/// An error already prefixed with "template line N: ".
class LocatedError : public Error {
 public:
  explicit LocatedError(const std::string& message) : Error(message) {}
};

/// raise_exception(msg) called by the template: what() is exactly msg.
class RaisedError : public Error {
 public:
  explicit RaisedError(const std::string& message) : Error(message) {}
};

}  // namespace rill::text::jinja
