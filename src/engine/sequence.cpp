// engine/sequence.cpp — see sequence.h.
#include "engine/sequence.h"

#include "kernels/sampling_math.h"

namespace rill {

void Sequence::append(int32_t token) {
  tokens.push_back(token);
  if (!request->uses_adjust) return;
  SamplingAdjust& a = adjust[token];
  a.token = token;
  a.output_count += 1;
  a.in_context = 1;
}

void Sequence::fill_pending(int32_t token) {
  pending_draw = -1;
  if (!tokens.empty() && tokens.back() == kPendingToken) tokens.pop_back();
  append(token);
}

uint64_t sequence_seed(uint64_t request_seed, int32_t index) {
  return index == 0 ? request_seed : sampling::mix64(request_seed ^ sampling::mix64(uint64_t(index)));
}

std::unordered_map<int32_t, SamplingAdjust> initial_adjust(const Request& request) {
  std::unordered_map<int32_t, SamplingAdjust> out;
  const SamplingParams& s = request.sampling;
  for (auto [token, bias] : s.logit_bias) {
    SamplingAdjust& a = out[token];
    a.token = token;
    a.bias += bias;
  }
  if (s.repetition_penalty != 1.f)
    for (int32_t t : request.prompt) {
      SamplingAdjust& a = out[t];
      a.token = t;
      a.in_context = 1;
    }
  return out;
}

}  // namespace rill
