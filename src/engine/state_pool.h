// engine/state_pool.h — StatePool: fixed-size per-sequence state for hybrid models (the conv and
// recurrent state of Gated DeltaNet layers). A slot holds one sequence's state for every layer
// that has one; a sequence takes a slot when admitted and returns it when it finishes or is
// preempted. Design only for now: the dense families need no state, so the engine runs with
// NoStatePool; the hybrid family implements this interface (and the prefix cache will store
// snapshots at block boundaries through snapshot()/restore()).
#pragma once

#include <cstdint>
#include <optional>

namespace rill {

using SlotId = int32_t;

class StatePool {
 public:
  virtual ~StatePool() = default;
  /// Bytes of state one slot holds over all layers (0: the model has no recurrent state).
  virtual size_t bytes_per_slot() const = 0;
  virtual int32_t num_slots() const = 0;
  virtual int32_t num_free() const = 0;
  /// A zeroed slot; nullopt when all are taken (the scheduler then waits or preempts).
  virtual std::optional<SlotId> allocate() = 0;
  virtual void release(SlotId slot) = 0;
  /// Copies `from`'s state into `to` (n > 1 sequences forked from one prompt).
  virtual void copy(SlotId from, SlotId to) = 0;
};

/// The pool of a model without recurrent state: no slots are ever needed.
class NoStatePool final : public StatePool {
 public:
  size_t bytes_per_slot() const override { return 0; }
  int32_t num_slots() const override { return 0; }
  int32_t num_free() const override { return 0; }
  std::optional<SlotId> allocate() override { return std::nullopt; }
  void release(SlotId) override {}
  void copy(SlotId, SlotId) override {}
};

}  // namespace rill
