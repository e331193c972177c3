// engine/engine_core.cpp — see engine_core.h.
#include "engine/engine_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include "core/error.h"
#include "core/log.h"

namespace rill {
namespace {

size_t cpu_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return size_t(4) << 30;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The step the arena will see at most, run once so that activations are allocated before the KV
// cache takes its share of the free memory. A hybrid model runs at most one row per state slot.
void warm_up(Model& model, const EngineOptions& o, int32_t state_slots) {
  int32_t rows = std::max(1, std::min(o.max_num_seqs, o.max_num_batched_tokens));
  if (state_slots > 0) rows = std::min(rows, state_slots);
  const int32_t per_row = o.max_num_batched_tokens / rows;
  int32_t blocks = 0;
  for (int32_t r = 0; r < rows; ++r)
    blocks += (per_row + (r == rows - 1 ? o.max_num_batched_tokens % rows : 0) + o.block_size - 1) / o.block_size;
  KvBuffers kv(model.kernels(), model.kv_spec(), blocks, o.block_size);
  StepBatchBuilder builder(o.block_size);
  std::vector<int32_t> table;
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(rows));
  int32_t next_block = 0;
  for (int32_t r = 0; r < rows; ++r) {
    const int32_t n = per_row + (r == rows - 1 ? o.max_num_batched_tokens % rows : 0);
    tokens[size_t(r)].assign(size_t(n), 1);
    table.clear();
    for (int32_t b = 0; b < (n + o.block_size - 1) / o.block_size; ++b) table.push_back(next_block++);
    builder.add_row(tokens[size_t(r)], 0, table, Logits::last);
  }
  StepBatch batch = builder.build();
  if (state_slots > 0)
    for (int32_t r = 0; r < rows; ++r) batch.state_slots.push_back(r);
  model.forward(batch, kv.layers());
  model.kernels().synchronize();
  for (int32_t r = 0; r < (state_slots > 0 ? rows : 0); ++r) model.release_state(r);
}

int32_t model_len(const Model& model, const EngineOptions& o) {
  const int32_t len = o.max_model_len > 0 ? o.max_model_len : int32_t(model.config().max_position_embeddings);
  return len > 0 ? len : INT32_MAX / 2;
}

// The draft source of speculative decoding, or null where it is off.
std::shared_ptr<DraftSource> draft_source_for(Model& model, const EngineOptions& o) {
  RILL_ENSURE(o.speculative_tokens >= 0 && o.speculative_tokens <= 32, "speculative_tokens: must be in [0, 32], got {}",
              o.speculative_tokens);
  RILL_ENSURE(o.speculative_max_running >= 1, "speculative_max_running: must be >= 1, got {}",
              o.speculative_max_running);
  if (o.speculative_tokens == 0) return nullptr;
  return o.draft_source ? o.draft_source : std::make_shared<NgramDraftSource>(o.ngram);
}

int32_t state_slots_for(Model& model, const EngineOptions& o) {
  if (model.state_bytes_per_sequence() == 0) return 0;
  return o.max_state_slots > 0 ? o.max_state_slots : o.max_num_seqs;
}

}  // namespace

MemoryPlan plan_memory(Model& model, const EngineOptions& o, int32_t state_slots) {
  const KvSpec spec = model.kv_spec();
  size_t bytes = o.kv_memory_bytes;
  if (bytes > 0) {
    // A size given outright is checked against what the device has, so that too large a cache is refused
    // naming the flag and both sizes rather than by the allocator (the CUDA backend's free memory counts
    // its allocator's cached blocks too; a device that does not report its memory is not checked).
    const bool cpu = model.kernels().device() == Device::cpu;
    const size_t available = cpu ? cpu_available_bytes() : model.kernels().free_memory();
    if (available > 0 && bytes > available)
      fail("--kv-memory: {} bytes asked for the KV cache, more than the {} bytes {} has available", bytes, available,
           cpu ? "this machine" : "the device");
  } else {
    if (model.kernels().device() == Device::cpu) {
      bytes = std::min(cpu_available_bytes() / 4, size_t(4) << 30);
    } else {
      warm_up(model, o, state_slots);
      const size_t free = model.kernels().free_memory();
      if (free == 0) fail("--kv-memory: the device does not report its free memory; give the KV cache size in bytes");
      bytes = size_t(double(free) * o.kv_memory_fraction);
    }
  }
  // Hybrid models with prefix caching: the state snapshots' share comes out of the same budget.
  MemoryPlan plan;
  if (state_slots > 0 && o.prefix_caching) {
    RILL_ENSURE(o.state_snapshot_fraction >= 0 && o.state_snapshot_fraction < 1,
                "state_snapshot_fraction: must be in [0, 1), got {}", o.state_snapshot_fraction);
    plan.snapshot_bytes = o.state_snapshot_bytes > 0 ? o.state_snapshot_bytes
                                                     : size_t(double(bytes) * o.state_snapshot_fraction);
    if (plan.snapshot_bytes >= bytes)
      fail("--state-snapshot-memory: {} bytes leave nothing of the {} bytes of cache memory for KV blocks",
           plan.snapshot_bytes, bytes);
    bytes -= plan.snapshot_bytes;
  }
  const int32_t blocks = KvCache::blocks_for_budget(spec, o.block_size, bytes);
  if (blocks < 1)
    fail("--kv-memory: {} bytes hold no KV block ({} bytes each for {} tokens)", bytes, spec.bytes_per_block(o.block_size),
         o.block_size);
  plan.kv_blocks = blocks;
  return plan;
}

int32_t kv_blocks_for(Model& model, const EngineOptions& o) {
  return plan_memory(model, o, state_slots_for(model, o)).kv_blocks;
}

EngineCore::EngineCore(Model& model, const EngineOptions& options)
    : model_(model),
      options_(options),
      state_pool_(model, state_slots_for(model, options)),
      memory_(plan_memory(model, options, state_pool_.num_slots())),
      kv_(std::make_unique<KvCache>(model.kernels(), model.kv_spec(), memory_.kv_blocks, options.block_size,
                                    options.prefix_caching)),
      snapshots_(model.kernels(), state_pool_.bytes_per_slot(), memory_.snapshot_bytes),
      sessions_(*kv_, snapshots_, state_pool_.enabled(), options.max_sessions, options.session_pinned_fraction),
      drafts_(draft_source_for(model, options)),
      scheduler_(*kv_, state_pool_, snapshots_,
                 SchedulerOptions{options.max_num_seqs, options.max_num_batched_tokens,
                                  std::max(1, kv_->num_blocks() / 100),
                                  options.snapshot_interval_blocks > 0
                                      ? options.snapshot_interval_blocks
                                      : std::max(1, options.max_num_batched_tokens / options.block_size),
                                  options.max_scored_tokens, drafts_.get(), options.speculative_tokens,
                                  options.speculative_max_running, model_len(model, options)},
                 &sessions_),
      executor_(model, *kv_, state_pool_.enabled()),
      overlap_(options.overlap_steps != EngineOptions::Overlap::off && model.accepts_token_source() &&
               (options.overlap_steps == EngineOptions::Overlap::on ||
                (model.kernels().device() != Device::cpu && !model.forward_waits_for_device()))) {
  const ModelConfig& c = model.config();
  max_model_len_ = model_len(model, options);
  vocab_size_ = c.vocab_size;
  const KvSpec spec = model.kv_spec();
  const std::string identity =
      options.model_identity.empty()
          ? fmt::format("{}/{}/h{}/l{}/v{}/w{}", c.architecture, c.model_type, c.hidden_size, c.num_hidden_layers,
                        c.vocab_size, model.weight_bytes())
          : options.model_identity;
  ns_prefix_ = fmt::format("{}|kv:{}:{}x{}x{}:bs{}|", identity, dtype_name(spec.dtype), spec.num_layers,
                           spec.num_kv_heads, spec.head_dim, options.block_size);
  logger().info("engine: {} KV blocks of {} tokens ({:.1f} MiB), max_model_len {}, prefix caching {}, steps {}",
                kv_->num_blocks(), options.block_size,
                double(spec.bytes_per_block(options.block_size)) * kv_->num_blocks() / (1 << 20), max_model_len_,
                options.prefix_caching ? "on" : "off",
                overlap_                  ? "overlapped (each launched before the previous one's ids are read)"
                : options.overlap_steps == EngineOptions::Overlap::off ? "one at a time"
                : !model.accepts_token_source() ? "one at a time (this model reads its ids from the host)"
                : model.forward_waits_for_device() ? "one at a time (this model's forward waits for the device)"
                                                   : "one at a time (the CPU computes a step as it is launched)");
  if (drafts_)
    logger().info("engine: speculative decoding: up to {} drafted tokens a row ({}), while at most {} sequences run{}",
                  options.speculative_tokens,
                  options.draft_source ? "the embedder's draft source"
                                       : fmt::format("n-gram lookup in the context, {}-{} tokens", options.ngram.min_n,
                                                     options.ngram.max_n),
                  options.speculative_max_running, overlap_ ? " (their steps are read one at a time)" : "");
  if (state_pool_.enabled())
    logger().info(
        "engine: hybrid model: {} state slots of {:.2f} MiB; prefix-cache state snapshots: {} of at most {} "
        "({:.1f} MiB budget), every {} blocks and at each prompt's last block boundary",
        state_pool_.num_slots(), double(state_pool_.bytes_per_slot()) / (1 << 20),
        snapshots_.enabled() ? "on" : "off", snapshots_.capacity(), double(memory_.snapshot_bytes) / (1 << 20),
        options.snapshot_interval_blocks > 0 ? options.snapshot_interval_blocks
                                             : std::max(1, options.max_num_batched_tokens / options.block_size));
}

EngineCore::~EngineCore() = default;

void EngineCore::validate(const Request& r) const {
  const SamplingParams& s = r.sampling;
  RILL_ENSURE(!r.prompt.empty(), "prompt: must hold at least one token");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    RILL_ENSURE(r.prompt[i] >= 0 && r.prompt[i] < vocab_size_, "prompt[{}]: token id {} is outside the vocabulary [0, {})",
                i, r.prompt[i], vocab_size_);
  for (int32_t t : r.stop_token_ids)
    RILL_ENSURE(t >= 0 && t < vocab_size_, "stop_token_ids: token id {} is outside the vocabulary [0, {})", t, vocab_size_);
  RILL_ENSURE(r.max_tokens >= 1, "max_tokens: must be >= 1, got {}", r.max_tokens);
  RILL_ENSURE(std::isfinite(s.temperature) && s.temperature >= 0.f, "temperature: must be >= 0, got {}", s.temperature);
  RILL_ENSURE(s.top_p > 0.f && s.top_p <= 1.f, "top_p: must be in (0, 1], got {}", s.top_p);
  RILL_ENSURE(s.top_k >= -1, "top_k: must be >= 0 (or -1 for off), got {}", s.top_k);
  RILL_ENSURE(s.min_p >= 0.f && s.min_p <= 1.f, "min_p: must be in [0, 1], got {}", s.min_p);
  RILL_ENSURE(std::isfinite(s.repetition_penalty) && s.repetition_penalty > 0.f,
              "repetition_penalty: must be > 0, got {}", s.repetition_penalty);
  RILL_ENSURE(std::isfinite(s.presence_penalty) && std::fabs(s.presence_penalty) <= 2.f,
              "presence_penalty: must be in [-2, 2], got {}", s.presence_penalty);
  RILL_ENSURE(std::isfinite(s.frequency_penalty) && std::fabs(s.frequency_penalty) <= 2.f,
              "frequency_penalty: must be in [-2, 2], got {}", s.frequency_penalty);
  for (auto [t, b] : s.logit_bias) {
    RILL_ENSURE(t >= 0 && t < vocab_size_, "logit_bias: token id {} is outside the vocabulary [0, {})", t, vocab_size_);
    RILL_ENSURE(!std::isnan(b) && b <= 100.f, "logit_bias[{}]: must be a number <= 100 (or -inf), got {}", t, b);
  }
  RILL_ENSURE(s.top_logprobs >= 0 && s.top_logprobs <= kMaxTopLogprobs, "top_logprobs: must be in [0, {}], got {}",
              kMaxTopLogprobs, s.top_logprobs);
  RILL_ENSURE(s.prompt_logprobs >= -1 && s.prompt_logprobs <= kMaxTopLogprobs,
              "prompt_logprobs: must be in [0, {}] (or -1 for off), got {}", kMaxTopLogprobs, s.prompt_logprobs);
  RILL_ENSURE(s.n >= 1 && s.n <= options_.max_n, "n: must be in [1, {}], got {}", options_.max_n, s.n);
}

RejectReason EngineCore::admissible(const Request& r, std::string& message) const {
  const int64_t total = int64_t(r.prompt.size()) + r.max_tokens;
  if (total > max_model_len_) {
    message = fmt::format("prompt ({} tokens) + max_tokens ({}) = {} exceeds the model's context of {} tokens",
                          r.prompt.size(), r.max_tokens, total, max_model_len_);
    return RejectReason::too_long;
  }
  const int64_t blocks = (total + kv_->block_size() - 1) / kv_->block_size();
  if (blocks > kv_->num_blocks()) {
    message = fmt::format(
        "prompt ({} tokens) + max_tokens ({}) needs {} KV blocks of {} tokens, but the whole KV cache holds {} "
        "({} tokens); lower max_tokens or give the engine more KV memory",
        r.prompt.size(), r.max_tokens, blocks, kv_->block_size(), kv_->num_blocks(),
        int64_t(kv_->num_blocks()) * kv_->block_size());
    return RejectReason::too_long;
  }
  if (state_pool_.enabled() && r.sampling.n > state_pool_.num_slots()) {
    message = fmt::format("n = {} sequences need {} recurrent-state slots, but the engine has {}", r.sampling.n,
                          r.sampling.n, state_pool_.num_slots());
    return RejectReason::too_long;
  }
  return RejectReason::none;
}

void EngineCore::add(Request request, RequestHandle stream, Clock::time_point submitted) {
  auto state = std::make_unique<RequestState>();
  RequestState& r = *state;
  r.id = stream->id();
  r.stream = std::move(stream);
  r.request = std::move(request);
  r.submitted = submitted;
  r.ns_key = PrefixCache::namespace_key(ns_prefix_ + r.request.cache_namespace);
  r.seed = r.request.sampling.seed ? *r.request.sampling.seed : std::random_device{}() * 0x100000001ull;
  const SamplingParams& s = r.request.sampling;
  r.uses_adjust = !s.logit_bias.empty() || s.repetition_penalty != 1.f || s.presence_penalty != 0.f ||
                  s.frequency_penalty != 0.f;
  auto seq = std::make_unique<Sequence>();
  seq->id = next_sequence_id_++;
  seq->request = &r;
  seq->tokens = r.request.prompt;
  seq->tokens.reserve(r.request.prompt.size() + size_t(r.request.max_tokens));
  seq->prompt_len = int32_t(r.request.prompt.size());
  seq->prompt_scored = s.prompt_logprobs >= 0 ? 1 : seq->prompt_len;
  seq->awaiting_fork = s.n > 1;
  seq->seed = sequence_seed(r.seed, 0);
  if (r.uses_adjust) seq->adjust = initial_adjust(r.request);
  scheduler_.enqueue(seq.get());
  r.sequences.push_back(std::move(seq));
  RILL_CHECK(requests_.emplace(r.id, std::move(state)).second, "request id {} submitted twice", r.id);
}

void EngineCore::cancel(uint64_t id) {
  if (inflight_) settle();  // no launched step may name a sequence this frees
  auto it = requests_.find(id);
  if (it == requests_.end()) return;  // already finished: its stream is complete
  RequestState& r = *it->second;
  for (auto& seq : r.sequences)
    if (seq->status != SequenceStatus::finished) {
      if (seq->index == 0 && !seq->table.empty()) pin_session(*seq);  // a waiting one keeps the old pin
      scheduler_.remove(seq.get());
    }
  TokenEvent e;
  e.finish = FinishReason::cancelled;
  e.request_done = true;
  e.prompt_tokens = int32_t(r.request.prompt.size());
  e.cached_tokens = r.cached_tokens;
  r.stream->push(std::move(e));
  ++counters_.requests_cancelled;
  requests_.erase(it);
}

void EngineCore::fail_all(const std::string& message, FinishReason reason) {
  // After a failed step its launch may be half made: nothing of it is read.
  inflight_.reset();
  executor_.abandon();
  for (auto& [id, state] : requests_) {
    for (auto& seq : state->sequences)
      if (seq->status != SequenceStatus::finished) scheduler_.remove(seq.get());
    TokenEvent e;
    e.finish = reason;
    e.error = message;
    e.request_done = true;
    state->stream->push(std::move(e));
  }
  requests_.clear();
}

bool EngineCore::step() {
  if (scheduler_.idle()) {
    if (!inflight_) return false;
    settle();  // the last draws
    return true;
  }
  drop_evicted_snapshots();
  StepPlan plan = scheduler_.schedule();
  drop_evicted_snapshots();
  if (plan.empty()) {
    // Every running sequence waits for a draw of the step in flight (its last by length).
    RILL_CHECK(inflight_, "scheduler made no progress with {} waiting and {} running sequences",
               scheduler_.num_waiting(), scheduler_.num_running());
    settle();
    if (options_.check_invariants) check_invariants();
    return true;
  }
  // A step with prompt chunks (hundreds of eager launches, no graph) is launched after the previous
  // step is read: its launch can wait for queue space, which would hold that step's events back.
  if (inflight_ && plan.num_tokens != int32_t(plan.rows.size())) {
    settle();
    // A sequence that drew a stop there has ended and freed its blocks: its row is dropped.
    std::erase_if(plan.rows, [](const ScheduledRow& r) { return r.seq->status == SequenceStatus::finished; });
    plan.num_tokens = 0;
    for (const ScheduledRow& r : plan.rows) plan.num_tokens += r.num_tokens;
    if (plan.rows.empty()) {
      if (options_.check_invariants) check_invariants();
      return true;
    }
  }
  InFlight next{std::move(plan), StepResult{}};
  executor_.launch(next.plan, next.result);
  if (inflight_) {  // the previous step's draws, read while the device runs this one
    settle();
    ++counters_.steps_overlapped;
  }
  advance(next.plan, next.result);
  inflight_ = std::move(next);
  if (!overlap_ || !may_overlap(*inflight_)) settle();
  ++counters_.num_steps;
  if (options_.check_invariants) check_invariants();
  return true;
}

bool EngineCore::may_overlap(const InFlight& f) const {
  // While sequences may speculate, the next step's drafts need this step's tokens on the host.
  if (drafts_ && scheduler_.num_running() <= options_.speculative_max_running) return false;
  for (const ScheduledRow& row : f.plan.rows)
    if (row.sample && row.seq->status != SequenceStatus::finished &&
        (row.seq->awaiting_fork || row.seq->num_drafts > 0))
      return false;
  return true;
}

void EngineCore::settle() {
  RILL_CHECK(inflight_, "settle with no step in flight");
  InFlight f = std::move(*inflight_);
  inflight_.reset();
  executor_.collect(f.result);
  commit_draws(f.plan, f.result);
  // Requests retired by the settle before this one may have had rows in this step: now unused.
  retired_before_ = std::move(retired_);
  retired_.clear();
}

Sequence* EngineCore::fork(Sequence& parent, int32_t index) {
  RequestState& r = *parent.request;
  auto child = std::make_unique<Sequence>();
  child->id = next_sequence_id_++;
  child->request = &r;
  child->index = index;
  child->tokens = parent.tokens;
  child->tokens.reserve(parent.tokens.capacity());
  child->prompt_len = parent.prompt_len;
  child->prompt_scored = parent.prompt_scored;  // forked after the prompt: all scored
  child->num_computed = parent.num_computed;
  child->seed = sequence_seed(r.seed, index);
  child->adjust = parent.adjust;
  kv_->fork(parent.table, child->table);
  if (state_pool_.enabled()) {
    RILL_CHECK(size_t(index) <= parent.fork_slots.size(), "sequence {} forks child {} without a state slot", parent.id,
               index);
    child->slot = parent.fork_slots[size_t(index - 1)];
    state_pool_.copy(parent.slot, child->slot);
  }
  Sequence* out = child.get();
  r.sequences.push_back(std::move(child));
  scheduler_.add_running(out);
  return out;
}

void EngineCore::advance(const StepPlan& plan, const StepResult& result) {
  for (Sequence* seq : plan.admitted)
    if (seq->index == 0 && seq->num_preemptions == 0 && seq->num_output() == 0) {
      counters_.prompt_tokens += seq->prompt_len;
      counters_.prefix_hit_tokens += seq->request->cached_tokens;
    }
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    const ScheduledRow& row = plan.rows[i];
    Sequence& seq = *row.seq;
    if (seq.status == SequenceStatus::finished) continue;  // a stop drawn in the step before; row wasted
    // Its prompt tokens' scores are launched (commit_draws takes them with the draws).
    if (const auto [lo, hi] = seq.scored_targets(row.start, row.num_tokens); lo < hi) seq.prompt_scored = hi;
    // A verifying row's drafts count as computed only once accepted (commit_drafts).
    seq.num_computed += row.num_tokens - seq.num_drafts;
    counters_.computed_tokens += row.num_tokens;
    kv_->commit(seq.table, seq.tokens, seq.num_computed, seq.request->ns_key);
    // (A verifying row's state is past num_computed; the scheduler ends its drafts before a boundary.)
    if (seq.num_drafts == 0 && scheduler_.is_snapshot_boundary(seq, seq.num_computed)) save_snapshot(seq);
    // A fork is made on the host when its draws are read; so are a verifying row's draws kept.
    if (!row.sample || seq.awaiting_fork || seq.num_drafts > 0) continue;
    // The draw goes at the end as a pending token, so the next step can feed it from the device —
    // unless it is the sequence's last by length: then the sequence has no row until it is read.
    seq.pending_draw = result.first[i];
    const Request& req = seq.request->request;
    if (seq.num_output() + 1 < req.max_tokens && seq.length() + 1 < max_model_len_) seq.tokens.push_back(kPendingToken);
  }
}

void EngineCore::commit_draws(const StepPlan& plan, StepResult& result) {
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    const ScheduledRow& row = plan.rows[i];
    Sequence& seq = *row.seq;
    if (seq.status == SequenceStatus::finished) continue;  // ended while this step ran
    if (const StepResult::Scores& sc = result.scores[i]; sc.count > 0) {
      RequestState& r = *seq.request;
      RILL_CHECK(int32_t(r.prompt_logprobs.size()) + 1 == sc.target, "request {}: prompt token {} scored after {}",
                 r.id, sc.target, r.prompt_logprobs.size());
      for (int32_t j = 0; j < sc.count; ++j) {
        SampledToken& t = result.tokens[size_t(sc.first + j)];
        r.prompt_logprobs.push_back({t.logprob, std::move(t.top_logprobs)});
      }
    }
    if (!row.sample) continue;
    const int32_t first = result.first[i];
    if (seq.awaiting_fork) {
      seq.awaiting_fork = false;
      const int32_t n = seq.request->request.sampling.n;
      // Children first: they copy the parent's tokens before it appends its own draw.
      std::vector<Sequence*> children;
      for (int32_t d = 1; d < n; ++d) children.push_back(fork(seq, d));
      seq.fork_slots.clear();
      emit(seq, result.tokens[size_t(first)], now);
      for (int32_t d = 1; d < n; ++d) emit(*children[size_t(d - 1)], result.tokens[size_t(first + d)], now);
    } else if (seq.num_drafts > 0) {
      commit_drafts(seq, row.start, result.tokens, first, now);
    } else {
      emit(seq, result.tokens[size_t(first)], now);
    }
  }
}

void EngineCore::commit_drafts(Sequence& seq, int32_t row_start, const std::vector<SampledToken>& draws,
                               int32_t first, Clock::time_point now) {
  const int32_t drafts = seq.num_drafts;
  const size_t base = seq.tokens.size() - size_t(drafts);
  RILL_CHECK(seq.num_computed == int32_t(base), "sequence {}: {} computed tokens before {} drafts at {}", seq.id,
             seq.num_computed, drafts, base);
  drafted_.assign(seq.tokens.begin() + std::ptrdiff_t(base), seq.tokens.end());
  seq.tokens.resize(base);
  seq.num_drafts = 0;
  counters_.spec_drafted_tokens += drafts;
  ++counters_.spec_verify_rows;
  // Draw j was made after the drafts before it: it is the sequence's next token while they all
  // matched. A draw equal to its draft keeps that draft's K/V (position base + j) as computed.
  int32_t accepted = 0;
  for (int32_t j = 0; j <= drafts; ++j) {
    const SampledToken& drawn = draws[size_t(first + j)];
    emit(seq, drawn, now);
    if (seq.status == SequenceStatus::finished) return;  // a stop, or max_tokens: blocks and slots are freed
    if (j == drafts || drawn.token != drafted_[size_t(j)]) break;
    ++seq.num_computed;
    ++accepted;
    ++counters_.spec_accepted_tokens;
  }
  if (seq.spec_slot >= 0) {
    // A hybrid model's state has consumed every draft. Kept whole, it is the state after the
    // computed tokens; otherwise the state from before the row comes back, and the row's tokens and
    // the kept drafts are computed again by the next row (their K/V is rewritten with the same bits).
    if (accepted < drafts) {
      state_pool_.copy(seq.spec_slot, seq.slot);
      seq.num_computed = row_start;
    }
    state_pool_.release(seq.spec_slot);
    seq.spec_slot = -1;
    if (accepted == drafts && scheduler_.is_snapshot_boundary(seq, seq.num_computed)) save_snapshot(seq);
  }
  // The rejected drafts' K/V lies past num_computed; the blocks past the sequence's length go back.
  kv_->commit(seq.table, seq.tokens, seq.num_computed, seq.request->ns_key);
  kv_->truncate(seq.table, kv_->blocks_for_tokens(seq.length()));
}

void EngineCore::emit(Sequence& seq, const SampledToken& drawn, Clock::time_point now) {
  RequestState& r = *seq.request;
  const Request& req = r.request;
  if (seq.status == SequenceStatus::finished) return;  // cannot happen; defensive against double events
  if (seq.pending_draw >= 0)
    seq.fill_pending(drawn.token);
  else
    seq.append(drawn.token);
  ++counters_.generated_tokens;
  double itl_s = 0;
  if (!r.has_first_token) {
    r.has_first_token = true;
    r.first_token = now;
    ttft_.add(seconds(now - r.submitted));
  } else if (seq.num_output() > 1) {
    itl_s = seconds(now - seq.last_token_time);
    itl_.add(itl_s);
  }
  seq.last_token_time = now;
  TokenEvent e;
  e.itl_s = itl_s;
  e.sequence = seq.index;
  e.token = drawn.token;
  e.logprob = drawn.logprob;
  e.top_logprobs = drawn.top_logprobs;
  // The request's first event carries its prompt logprobs (all scored by the step that drew it).
  if (!r.prompt_logprobs.empty()) e.prompt_logprobs = std::move(r.prompt_logprobs);
  r.prompt_logprobs.clear();
  e.prompt_tokens = seq.prompt_len;
  e.cached_tokens = r.cached_tokens;
  e.ttft_s = seconds(r.first_token - r.submitted);
  FinishReason reason = FinishReason::none;
  if (std::find(req.stop_token_ids.begin(), req.stop_token_ids.end(), drawn.token) != req.stop_token_ids.end())
    reason = FinishReason::stop;
  else if (seq.num_output() >= req.max_tokens || seq.length() >= max_model_len_)
    reason = FinishReason::length;
  if (reason != FinishReason::none) {
    finish_sequence(seq, reason, e);
  } else {
    r.stream->push(std::move(e));
  }
}

void EngineCore::finish_sequence(Sequence& seq, FinishReason reason, TokenEvent& e) {
  RequestState& r = *seq.request;
  // (A sequence preempted while its last draw was in flight holds no blocks: the old pin stays.)
  if (seq.index == 0 && !seq.table.empty()) pin_session(seq);
  scheduler_.remove(&seq);
  e.finish = reason;
  ++r.num_finished;
  const bool done = r.num_finished == r.request.sampling.n;
  e.request_done = done;
  r.stream->push(std::move(e));
  if (done) {
    ++counters_.requests_finished;
    // Kept alive until no launched step names its sequences (settle), then destroyed.
    auto it = requests_.find(r.id);
    retired_.push_back(std::move(it->second));
    requests_.erase(it);
  }
}

void EngineCore::drop_evicted_snapshots() {
  for (BlockHash key : kv_->take_evicted_keys()) snapshots_.erase(key);
}

void EngineCore::save_snapshot(Sequence& seq) {
  const size_t blocks = size_t(seq.num_computed / kv_->block_size());
  if (seq.table.keys.size() < blocks) return;
  const BlockHash key = seq.table.keys[blocks - 1];
  if (snapshots_.contains(key) || !kv_->prefix_cache().has_key(key)) return;
  StateSnapshot& s = snapshots_.insert(key);
  s.position = state_pool_.save(seq.slot, s.state);
  RILL_CHECK(s.position == seq.num_computed, "sequence {}: state at position {} after {} computed tokens", seq.id,
             s.position, seq.num_computed);
  ++counters_.state_snapshots_saved;
}

void EngineCore::pin_session(const Sequence& seq) {
  const std::string& session = seq.request->request.session_id;
  if (session.empty() || !sessions_.enabled()) return;
  // The keys cover the computed full blocks: the prompt's and the reply's (but its last token).
  sessions_.pin(session, seq.table.keys);
}

EngineStats EngineCore::stats() const {
  EngineStats s = counters_;
  s.num_waiting = scheduler_.num_waiting();
  s.num_running = scheduler_.num_running();
  s.kv_blocks_total = kv_->num_blocks();
  s.kv_blocks_free = kv_->num_available();
  s.kv_blocks_used = kv_->pool().num_used();
  s.kv_blocks_cached = kv_->pool().num_evictable();
  s.block_size = kv_->block_size();
  s.num_preemptions = int64_t(scheduler_.num_preemptions());
  s.state_slots_total = state_pool_.num_slots();
  s.state_slots_used = state_pool_.num_slots() - state_pool_.num_free();
  s.state_snapshots = snapshots_.count();
  s.state_snapshot_bytes = int64_t(snapshots_.bytes());
  s.state_snapshot_budget_bytes = int64_t(snapshots_.budget_bytes());
  s.state_snapshots_evicted = snapshots_.num_evicted();
  s.sessions_pinned = sessions_.num_sessions();
  s.session_blocks_pinned = sessions_.num_pinned_blocks();
  s.sessions_unpinned_for_space = sessions_.num_unpinned_for_space();
  s.ttft = ttft_.summary();
  s.itl = itl_.summary();
  return s;
}

void EngineCore::check_invariants() const {
  std::vector<const BlockTable*> tables;
  std::vector<SlotId> slots;
  for (auto& [id, r] : requests_)
    for (auto& seq : r->sequences) {
      if (seq->status == SequenceStatus::finished) {
        RILL_CHECK(seq->table.empty(), "finished sequence {} holds blocks", seq->id);
        RILL_CHECK(seq->slot < 0 && seq->fork_slots.empty(), "finished sequence {} holds a state slot", seq->id);
        continue;
      }
      if (seq->status == SequenceStatus::waiting)
        RILL_CHECK(seq->slot < 0 && seq->fork_slots.empty(), "waiting sequence {} holds a state slot", seq->id);
      if (seq->status == SequenceStatus::running && state_pool_.enabled())
        RILL_CHECK(seq->slot >= 0, "running sequence {} of a hybrid model holds no state slot", seq->id);
      if (seq->slot >= 0) slots.push_back(seq->slot);
      if (seq->spec_slot >= 0) slots.push_back(seq->spec_slot);
      slots.insert(slots.end(), seq->fork_slots.begin(), seq->fork_slots.end());
      RILL_CHECK(seq->num_computed < seq->length() || seq->pending_draw >= 0, "live sequence {} has nothing to compute",
                 seq->id);
      RILL_CHECK(int64_t(seq->table.blocks.size()) * kv_->block_size() >= seq->num_computed,
                 "sequence {}: table too short for {} computed tokens", seq->id, seq->num_computed);
      if (seq->status == SequenceStatus::waiting) RILL_CHECK(seq->table.empty(), "waiting sequence {} holds blocks", seq->id);
      tables.push_back(&seq->table);
    }
  sessions_.tables(tables);
  kv_->check_invariants(tables);
  sessions_.check_invariants();
  if (state_pool_.enabled()) state_pool_.check_invariants(slots);
  snapshots_.check_invariants();
  // A snapshot lives only while its prefix's last block is in the prefix cache.
  for (BlockHash key : snapshots_.keys())
    RILL_CHECK(kv_->prefix_cache().has_key(key), "state snapshot {:x} outlived its prefix-cache block", key);
}

}  // namespace rill
