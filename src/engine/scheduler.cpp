// engine/scheduler.cpp — see scheduler.h.
#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace rill {

Scheduler::Scheduler(KvCache& kv, StatePool& states, StateSnapshots& snapshots, const SchedulerOptions& options,
                     SessionPins* sessions)
    : kv_(kv), states_(states), snapshots_(snapshots), options_(options), sessions_(sessions) {
  RILL_ENSURE(options.snapshot_interval_blocks > 0, "snapshot_interval_blocks must be > 0, got {}",
              options.snapshot_interval_blocks);
  RILL_ENSURE(options.max_num_seqs > 0, "max_num_seqs must be > 0, got {}", options.max_num_seqs);
  RILL_ENSURE(options.max_num_batched_tokens > 0, "max_num_batched_tokens must be > 0, got {}",
              options.max_num_batched_tokens);
  RILL_ENSURE(options.max_scored_tokens > 0, "max_scored_tokens must be > 0, got {}", options.max_scored_tokens);
  running_.reserve(size_t(options.max_num_seqs));
}

void Scheduler::enqueue(Sequence* seq) {
  seq->status = SequenceStatus::waiting;
  waiting_.push_back(seq);
}

void Scheduler::add_running(Sequence* seq) {
  seq->status = SequenceStatus::running;
  running_.push_back(seq);
}

void Scheduler::remove(Sequence* seq) {
  if (seq->status == SequenceStatus::running) {
    auto it = std::find(running_.begin(), running_.end(), seq);
    RILL_CHECK(it != running_.end(), "running sequence {} not in the running list", seq->id);
    running_.erase(it);
  } else if (seq->status == SequenceStatus::waiting) {
    auto it = std::find(waiting_.begin(), waiting_.end(), seq);
    if (it != waiting_.end()) waiting_.erase(it);
  }
  kv_.free(seq->table);
  release_slots(seq);
  seq->status = SequenceStatus::finished;
}

void Scheduler::release_slots(Sequence* seq) {
  if (seq->slot >= 0) states_.release(seq->slot);
  seq->slot = -1;
  if (seq->spec_slot >= 0) states_.release(seq->spec_slot);
  seq->spec_slot = -1;
  for (SlotId s : seq->fork_slots) states_.release(s);
  seq->fork_slots.clear();
}

bool Scheduler::is_snapshot_boundary(const Sequence& seq, int32_t tokens) const {
  if (!states_.enabled() || !snapshots_.enabled() || tokens <= 0) return false;
  const int32_t bs = kv_.block_size();
  if (tokens % bs != 0) return false;
  return (tokens / bs) % options_.snapshot_interval_blocks == 0 || tokens == (seq.prompt_len - 1) / bs * bs;
}

int32_t Scheduler::cut_at_boundary(const Sequence& seq, int32_t start, int32_t n) const {
  if (!states_.enabled() || !snapshots_.enabled()) return n;
  const int32_t every = options_.snapshot_interval_blocks * kv_.block_size();
  int32_t end = start + n;
  end = std::min(end, (start / every + 1) * every);
  const int32_t prompt_boundary = (seq.prompt_len - 1) / kv_.block_size() * kv_.block_size();
  if (prompt_boundary > start) end = std::min(end, prompt_boundary);
  return end - start;
}

int32_t Scheduler::cut_for_scores(const Sequence& seq, int32_t n) const {
  return seq.scoring() ? std::min(n, score_budget_) : n;
}

void Scheduler::preempt(Sequence* seq, StepPlan& plan) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  RILL_CHECK(it != running_.end(), "preempting sequence {} that is not running", seq->id);
  running_.erase(it);
  kv_.free(seq->table);
  release_slots(seq);
  seq->num_computed = 0;
  seq->status = SequenceStatus::waiting;
  ++seq->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(seq);
  plan.preempted.push_back(seq);
}

// Gives `seq` (running) a row, preempting lower-priority sequences while blocks are short.
// Returns false when `seq` itself had to be preempted.
bool Scheduler::schedule_running(Sequence* seq, int32_t& budget, StepPlan& plan) {
  if (schedule_drafts(seq, budget, plan)) return true;
  const int32_t start = seq->num_computed;
  const int32_t n = cut_for_scores(*seq, cut_at_boundary(*seq, start, std::min(seq->num_uncomputed(), budget)));
  if (n <= 0) return true;
  while (!kv_.reserve(seq->table, start, start + n, plan.copies)) {
    if (sessions_ && sessions_->unpin_lru()) continue;  // session pins go before running sequences
    Sequence* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it)
      if (*it != seq && (*it)->scheduled_step != step_) {
        victim = *it;
        break;
      }
    if (!victim) {
      preempt(seq, plan);
      return false;
    }
    preempt(victim, plan);
  }
  seq->scheduled_step = step_;
  plan.rows.push_back({seq, start, n, start + n == seq->length()});
  plan.num_tokens += n;
  budget -= n;
  if (seq->scoring()) score_budget_ -= n;
  return true;
}

int32_t Scheduler::slots_to_admit(const Sequence& seq) const {
  return !states_.enabled() ? 0 : seq.awaiting_fork ? seq.request->request.sampling.n : 1;
}

bool Scheduler::schedule_drafts(Sequence* seq, int32_t& budget, StepPlan& plan) {
  const SchedulerOptions& o = options_;
  // The row covers the sequence's uncomputed tokens — its last one, or after a hybrid model's rollback
  // the kept tokens too (EngineCore::commit_drafts), or a prompt's last chunk — and the drafts.
  const int32_t start = seq->num_computed, u = seq->num_uncomputed();
  // A hybrid model's spare slot comes from slots that the next waiting sequence does not need: a guess
  // never holds an admission back.
  if (!o.drafts || o.spec_tokens <= 0 || u < 1 || u > kMaxRecurrentDrafts || seq->pending_draw >= 0 ||
      seq->awaiting_fork || seq->scoring() || int32_t(running_.size()) > o.spec_max_running ||
      (states_.enabled() && states_.num_free() <= (waiting_.empty() ? 0 : slots_to_admit(*waiting_.front()))))
    return false;
  // The drafts, and the draw after the last accepted one, stay within max_tokens and the context, and
  // leave a token of the budget to every decode row still to be planned.
  const Request& req = seq->request->request;
  int32_t room = std::min({o.spec_tokens, budget - u - decode_left_, req.max_tokens - seq->num_output() - 1,
                           o.max_model_len - seq->length() - 1});
  if (states_.enabled())
    room = std::min({room, kMaxRecurrentDrafts + 1 - u, cut_at_boundary(*seq, start, u + room) - u});
  if (room <= 0) return false;
  drafts_.clear();
  o.drafts->propose(seq->tokens, room, drafts_);
  if (drafts_.empty()) return false;
  if (int32_t(drafts_.size()) > room) drafts_.resize(size_t(room));
  const int32_t n = u + int32_t(drafts_.size());
  // Blocks for the drafts only where they are free: a guess never preempts a sequence.
  if (kv_.blocks_for_tokens(start + n) - int32_t(seq->table.blocks.size()) > kv_.num_available() ||
      !kv_.reserve(seq->table, start, start + n, plan.copies))
    return false;
  if (states_.enabled()) {
    // No step is in flight while drafts are planned (they need the last step's tokens), so the copy
    // is the state after the sequence's computed tokens, taken before this step's forward.
    seq->spec_slot = *states_.allocate();
    states_.copy(seq->slot, seq->spec_slot);
  }
  seq->tokens.insert(seq->tokens.end(), drafts_.begin(), drafts_.end());
  seq->num_drafts = int32_t(drafts_.size());
  seq->scheduled_step = step_;
  plan.rows.push_back({seq, start, n, true});
  plan.num_tokens += n;
  budget -= n;
  return true;
}

bool Scheduler::admit(Sequence* seq, int32_t& budget, StepPlan& plan) {
  RILL_CHECK(seq->table.empty() && seq->num_computed == 0 && seq->slot < 0, "waiting sequence {} holds KV or state",
             seq->id);
  // A hybrid model's sequence needs a state slot (and its n - 1 children's, forked after the prompt).
  const int32_t slots_needed = slots_to_admit(*seq);
  if (slots_needed > states_.num_free()) return false;
  if (seq->scoring() && score_budget_ <= 0) return false;
  // Reuse cached full blocks, but always compute at least the last token (its logits are needed),
  // and every position whose logits score a prompt token not yet scored.
  const uint64_t ns = seq->request->ns_key;
  const int32_t reusable = seq->scoring() ? seq->prompt_scored - 1 : seq->length() - 1;
  int32_t cached = kv_.match_prefix(seq->tokens, reusable, ns, seq->table);
  const StateSnapshot* snapshot = nullptr;
  if (states_.enabled()) {
    // Only a boundary with a state snapshot can be resumed: cut the hit back to the last one.
    int32_t blocks = int32_t(seq->table.blocks.size());
    while (blocks > 0 && !(snapshot = snapshots_.find(seq->table.keys[size_t(blocks - 1)]))) --blocks;
    kv_.truncate(seq->table, blocks);
    cached = blocks * kv_.block_size();
  }
  const int32_t n = cut_for_scores(*seq, cut_at_boundary(*seq, cached, std::min(seq->length() - cached, budget)));
  const int32_t reserve_extra = running_.empty() ? 0 : options_.watermark_blocks;
  const int32_t need = kv_.blocks_for_tokens(cached + n) - int32_t(seq->table.blocks.size());
  while (need + reserve_extra > kv_.num_available() && sessions_ && sessions_->unpin_lru()) {
  }
  if (need + reserve_extra > kv_.num_available() || !kv_.reserve(seq->table, cached, cached + n, plan.copies)) {
    kv_.free(seq->table);
    return false;
  }
  seq->num_computed = cached;
  RequestState& r = *seq->request;
  // The session's pin moves: this sequence holds the prefix it matched; its end pins again.
  if (sessions_ && seq->index == 0 && !r.cached_tokens_known && !r.request.session_id.empty())
    sessions_->unpin(r.request.session_id);
  if (slots_needed > 0) {
    seq->slot = *states_.allocate();
    for (int32_t i = 1; i < slots_needed; ++i) seq->fork_slots.push_back(*states_.allocate());
    if (snapshot) {
      RILL_CHECK(snapshot->position == cached, "state snapshot at position {} for a prefix of {} tokens",
                 snapshot->position, cached);
      states_.restore(seq->slot, snapshot->state, cached);
    }
  }
  if (seq->index == 0 && !r.cached_tokens_known) {
    r.cached_tokens = cached;
    r.cached_tokens_known = true;
  }
  seq->status = SequenceStatus::running;
  seq->scheduled_step = step_;
  running_.push_back(seq);
  plan.admitted.push_back(seq);
  plan.rows.push_back({seq, cached, n, cached + n == seq->length()});
  plan.num_tokens += n;
  budget -= n;
  if (seq->scoring()) score_budget_ -= n;
  return true;
}

StepPlan Scheduler::schedule() {
  ++step_;
  StepPlan plan;
  int32_t budget = options_.max_num_batched_tokens;
  score_budget_ = options_.max_scored_tokens;
  decode_left_ = 0;
  for (const Sequence* seq : running_) decode_left_ += seq->num_uncomputed() == 1 ? 1 : 0;
  // Decode rows first so that long prefills never stall generating sequences, then prefill chunks.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < running_.size() && budget > 0 && int32_t(plan.rows.size()) < options_.max_num_seqs;) {
      Sequence* seq = running_[i];
      const bool decode = seq->num_uncomputed() == 1;
      if (seq->scheduled_step == step_ || decode != (pass == 0)) {
        ++i;
        continue;
      }
      if (decode) --decode_left_;
      const size_t before = running_.size();
      const bool kept = schedule_running(seq, budget, plan);
      // Preemption removed sequences behind this one (or this one): re-find our place.
      if (!kept || running_.size() != before) {
        auto it = std::find(running_.begin(), running_.end(), seq);
        i = it == running_.end() ? i : size_t(it - running_.begin()) + 1;
      } else {
        ++i;
      }
    }
  }
  if (plan.preempted.empty()) {
    while (!waiting_.empty() && budget > 0 && int32_t(running_.size()) < options_.max_num_seqs) {
      if (!admit(waiting_.front(), budget, plan)) break;
      waiting_.pop_front();
    }
  }
  return plan;
}

}  // namespace rill
