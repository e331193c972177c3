// model/layers/rope.h — rotary frequency tables (default, linear, llama3, YaRN) computed once at
// load in f32, in the same operation order as transformers' modeling_rope_utils so the tables
// match the reference bit for bit where the math library allows.
#pragma once

#include <vector>

#include "model/config.h"

namespace rill {

struct RopeFrequencies {
  std::vector<float> inv_freq;   ///< [rotary_dim / 2]
  int rotary_dim = 0;
  float attention_factor = 1.f;
};

/// Frequencies for a head of `head_dim` under the config's rope parameters.
RopeFrequencies compute_rope_frequencies(const RopeParameters& rope, int64_t head_dim);

}  // namespace rill
