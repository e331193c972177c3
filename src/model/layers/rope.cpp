// model/layers/rope.cpp — see rope.h. Every intermediate is f32 where transformers keeps a f32
// tensor, and double where it uses Python floats (the scalar parts of YaRN's correction range).
#include "model/layers/rope.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace rill {
namespace {

// base ** (arange(0, dim, 2) / dim) in f32.
std::vector<float> pos_freqs(double base, int dim) {
  std::vector<float> out(size_t(dim / 2));
  for (int j = 0; j < dim / 2; ++j) {
    float exponent = float(2 * j) / float(dim);
    out[size_t(j)] = std::pow(float(base), exponent);
  }
  return out;
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

double correction_dim(double rotations, int dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (rotations * 2 * M_PI))) / (2 * std::log(base));
}

}  // namespace

RopeFrequencies compute_rope_frequencies(const RopeParameters& rope, int64_t head_dim) {
  RopeFrequencies out;
  int dim = int(double(head_dim) * rope.partial_rotary_factor);
  if (dim <= 0 || dim % 2 != 0 || dim > head_dim)
    fail("rope: rotary dimension {} (head_dim {} × partial_rotary_factor {}) must be even and in (0, head_dim]",
         dim, head_dim, rope.partial_rotary_factor);
  out.rotary_dim = dim;
  std::vector<float> pf = pos_freqs(rope.rope_theta, dim);
  out.inv_freq.resize(pf.size());
  for (size_t j = 0; j < pf.size(); ++j) out.inv_freq[j] = 1.0f / pf[j];

  const float factor = float(rope.factor);
  if (rope.rope_type == "linear") {
    for (float& f : out.inv_freq) f = f / factor;
  } else if (rope.rope_type == "llama3") {
    const float old_len = float(rope.original_max_position_embeddings);
    const float lf = float(rope.low_freq_factor), hf = float(rope.high_freq_factor);
    const float low_wavelen = old_len / lf, high_wavelen = old_len / hf;
    for (float& inv : out.inv_freq) {
      float wavelen = float(2 * M_PI) / inv;
      float scaled = wavelen > low_wavelen ? inv / factor : inv;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        float smooth = (old_len / wavelen - lf) / (hf - lf);
        scaled = (1 - smooth) * scaled / factor + smooth * scaled;
      }
      inv = scaled;
    }
  } else if (rope.rope_type == "yarn") {
    double attention = 1.0;
    if (rope.attention_factor) {
      attention = *rope.attention_factor;
    } else if (rope.mscale && rope.mscale_all_dim && *rope.mscale != 0 && *rope.mscale_all_dim != 0) {
      attention = yarn_mscale(rope.factor, *rope.mscale) / yarn_mscale(rope.factor, *rope.mscale_all_dim);
    } else {
      attention = yarn_mscale(rope.factor, 1.0);
    }
    out.attention_factor = float(attention);
    double max_pos = double(rope.original_max_position_embeddings);
    double low = correction_dim(rope.beta_fast, dim, rope.rope_theta, max_pos);
    double high = correction_dim(rope.beta_slow, dim, rope.rope_theta, max_pos);
    if (rope.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, double(dim - 1));
    if (low == high) high += 0.001;
    for (size_t j = 0; j < pf.size(); ++j) {
      float ramp = (float(j) - float(low)) / (float(high) - float(low));
      ramp = std::clamp(ramp, 0.f, 1.f);
      float extrapolation_factor = 1 - ramp;
      float extrapolation = 1.0f / pf[j];
      float interpolation = 1.0f / (factor * pf[j]);
      out.inv_freq[j] = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
  }
  return out;
}

}  // namespace rill
