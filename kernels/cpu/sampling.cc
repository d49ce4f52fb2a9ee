// Token sampling on the CPU, one row per work item, following the row semantics written on
// Backend::Sample exactly (temperature, top-k, softmax, sort, top-p prefix, one uniform draw
// from SampleUniform(seed, step)). Greedy rows take an argmax fast path. The kept set is
// sorted only as far as the walk needs: a growing partial sort, since the nucleus or the
// drawn token is usually within the first few dozen candidates.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/sampling_rng.h"

namespace saturn::cpu {
namespace {

struct Candidate {
  float z;  // logit / temperature
  int32_t id;
};

// Descending z, lower id first on ties: the order of descending p (exp is monotonic).
bool Before(const Candidate& a, const Candidate& b) {
  return a.z > b.z || (a.z == b.z && a.id < b.id);
}

// The lowest index of the largest value. A NaN never wins, wherever it stands (the CUDA
// sampler's rule); a row of NaNs gives 0.
int32_t Argmax(const float* x, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    if (best < 0 || x[i] > x[best]) best = i;
  }
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

struct RowParams {
  float temperature;
  int32_t top_k;
  float top_p;
  int64_t seed;
  int32_t step;
};

int32_t SampleRow(const float* logits, int64_t vocab, const RowParams& rp,
                  std::vector<Candidate>& c) {
  if (!(rp.temperature > 0.0f)) return Argmax(logits, vocab);
  c.resize(vocab);
  for (int64_t i = 0; i < vocab; ++i) c[i] = {logits[i] / rp.temperature, static_cast<int32_t>(i)};
  const int64_t kept = rp.top_k > 0 && rp.top_k < vocab ? rp.top_k : vocab;
  if (kept < vocab) std::nth_element(c.begin(), c.begin() + kept, c.end(), Before);
  double z_max = c[0].z;
  for (int64_t i = 1; i < kept; ++i) z_max = std::max<double>(z_max, c[i].z);
  double total = 0;
  for (int64_t i = 0; i < kept; ++i) total += std::exp(c[i].z - z_max);
  const auto prob = [&](int64_t i) { return std::exp(c[i].z - z_max) / total; };

  int64_t sorted = 0;  // c[0, sorted) is in final order
  const auto ensure_sorted = [&](int64_t i) {
    if (i < sorted) return;
    const int64_t n = std::min(kept, std::max<int64_t>({64, 4 * sorted, i + 1}));
    std::partial_sort(c.begin() + sorted, c.begin() + n, c.begin() + kept, Before);
    sorted = n;
  };

  // Top-p: the shortest sorted prefix whose mass reaches top_p (at least one token).
  int64_t prefix = kept;
  double mass = 1.0;
  if (rp.top_p < 1.0f) {
    double cum = 0;
    int64_t i = 0;
    while (i < kept) {
      ensure_sorted(i);
      cum += prob(i++);
      if (cum >= rp.top_p) break;
    }
    prefix = i;
    mass = cum;
  }

  const double u = SampleUniform(rp.seed, rp.step) * mass;
  double cum = 0;
  int32_t last_nonzero = c[0].id;
  for (int64_t i = 0; i < prefix; ++i) {
    ensure_sorted(i);
    const double p = prob(i);
    cum += p;
    if (cum > u) return c[i].id;
    if (p > 0) last_nonzero = c[i].id;
  }
  return last_nonzero;  // rounding left u at or past the summed mass
}

}  // namespace

absl::Status Sample(ThreadPool& pool, const Tensor& logits, const SamplingBatch& params,
                    const Tensor& tokens) {
  for (auto [name, t, d] : {std::tuple{"temperature", &params.temperature, DType::kF32},
                            std::tuple{"top_k", &params.top_k, DType::kI32},
                            std::tuple{"top_p", &params.top_p, DType::kF32},
                            std::tuple{"step", &params.step, DType::kI32},
                            std::tuple{"tokens", &tokens, DType::kI32}}) {
    if (absl::Status s = ExpectDType(name, *t, d); !s.ok()) return s;
  }
  const int64_t vocab = logits.cols;
  if (vocab <= 0) return absl::InvalidArgumentError("logits have no columns");
  pool.ParallelFor(logits.rows, RowGrain(vocab), [&](int64_t begin, int64_t end) {
    std::vector<Candidate> scratch;
    for (int64_t r = begin; r < end; ++r) {
      const RowParams rp{params.temperature.as<float>()[r], params.top_k.as<int32_t>()[r],
                         params.top_p.as<float>()[r], params.seed.as<int64_t>()[r],
                         params.step.as<int32_t>()[r]};
      tokens.as<int32_t>()[r] = SampleRow(logits.as<float>() + r * vocab, vocab, rp, scratch);
    }
  });
  return absl::OkStatus();
}

}  // namespace saturn::cpu
