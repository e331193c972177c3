// server/engine_api.h — what the serving layer needs from an engine: submit, cancel, stats and
// the two sizes requests are checked against. `rill serve` passes the real Engine through
// EngineAdapter; tests drive the whole HTTP API over a scripted double (exact response bodies
// for a known token stream). Not responsible for anything the Engine does behind it.
#pragma once

#include <cstdint>

#include "engine/engine.h"

namespace rill::server {

class EngineApi {
 public:
  virtual ~EngineApi() = default;
  /// As Engine::submit: throws rill::Error on a malformed request, returns a typed refusal.
  virtual Submission submit(const Request& request) = 0;
  virtual void cancel(const RequestHandle& handle) = 0;
  virtual EngineStats stats() const = 0;
  virtual int32_t max_model_len() const = 0;
  virtual int64_t vocab_size() const = 0;
};

/// The real engine behind EngineApi (borrowed; it must outlive the adapter).
class EngineAdapter final : public EngineApi {
 public:
  explicit EngineAdapter(Engine& engine) : engine_(engine) {}
  Submission submit(const Request& request) override { return engine_.submit(request); }
  void cancel(const RequestHandle& handle) override { engine_.cancel(handle); }
  EngineStats stats() const override { return engine_.stats(); }
  int32_t max_model_len() const override { return engine_.max_model_len(); }
  int64_t vocab_size() const override { return engine_.model().config().vocab_size; }

 private:
  Engine& engine_;
};

}  // namespace rill::server
