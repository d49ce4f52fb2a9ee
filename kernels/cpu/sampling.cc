// Token sampling on the CPU, one row per work item, following the row semantics written on
// Backend::Sample exactly (temperature, top-k, softmax, sort, top-p prefix, one uniform draw
// from SampleUniform(seed, step)). Greedy rows take an argmax fast path.
//
// The walk down the sorted kept set is done without sorting it: the kept tokens are bucketed
// by z_max - z (buckets follow the sort order, each knows its summed p). A walk adds whole
// buckets while their mass stays clearly short of its target, and sorts and walks token by
// token only the bucket where the running sum crosses it. That is linear in the vocabulary
// where a sorted walk is not: on a flat row (random weights, a high temperature) the draw
// lands half way down the vocabulary, 4.4 ms a row of 32,000 sorted where this takes 0.23.
// Running sums differ from a full sort's only in the order whole buckets were added (double
// rounding, ~1e-16), which kMargin keeps from moving a crossing.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/sampling_rng.h"

namespace saturn::cpu {
namespace {

struct Candidate {
  float z;  // logit / temperature; NaN is taken as -inf (it never wins, as in greedy rows)
  int32_t id;
  double e;  // exp(z - z_max); p = e / the kept tokens' summed e
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

constexpr int kBuckets = 512;
// A bucket is added whole only while the running sum plus its mass stays this far below
// the target, so a rounding difference from the sorted order cannot move the crossing.
constexpr double kMargin = 1e-9;

// Buckets are grouped (their tokens copied into `bucket`) this many at a time, when a walk
// first needs one of them token by token: most walks end in the first bucket they open.
constexpr int kGroupSpan = 8;

struct Scratch {
  std::vector<Candidate> top_k;   // top-k rows: the row, the kept tokens first
  std::vector<float> z;           // the kept tokens' z
  std::vector<int32_t> id;        // and their ids (top-k rows; elsewhere id = index)
  std::vector<uint16_t> of;       // and their buckets
  std::vector<Candidate> bucket;  // kept tokens grouped by bucket, in bucket order, where grouped
  std::array<int64_t, kBuckets + 1> begin{};
  std::array<double, kBuckets> mass{};
  std::array<bool, kBuckets> grouped{};
  std::array<bool, kBuckets> sorted{};
  int64_t kept = 0;
  double z_max = 0;
  double total = 0;  // summed e over the kept tokens
};

// The kept tokens in sort order, walked by running sum.
class SortedWalk {
 public:
  explicit SortedWalk(Scratch& s) : s_(s) {}

  struct Stop {
    int64_t count;  // tokens walked, the crossing one included
    double cum;     // their summed p
    bool reached;
  };

  // From the first token, the first whose running sum reaches `target` (>= when `inclusive`,
  // > otherwise), looking at the first `limit` tokens only; or all of them, not reached.
  Stop Walk(double target, bool inclusive, int64_t limit) {
    double cum = 0;
    for (int b = 0; b < kBuckets && s_.begin[b] < limit; ++b) {
      const int64_t lo = s_.begin[b], hi = std::min(s_.begin[b + 1], limit);
      if (hi == lo || s_.mass[b] == 0) continue;  // no p above 0: never crosses
      if (hi == s_.begin[b + 1] && cum + s_.mass[b] < target - kMargin) {
        cum += s_.mass[b];
        continue;
      }
      SortBucket(b);
      for (int64_t i = lo; i < hi; ++i) {
        cum += s_.bucket[i].e / s_.total;
        if (inclusive ? cum >= target : cum > target) return {i + 1, cum, true};
      }
    }
    return {limit, cum, false};
  }

  // The token at position `i` of the sort order, as returned in a Stop's count - 1.
  const Candidate& At(int64_t i) {
    SortBucket(BucketAt(i));
    return s_.bucket[i];
  }

  // The last of the first `limit` tokens in sort order whose p is above 0 (rounding left a
  // draw at or past the summed mass); the first token when none is. `limit` ends inside a
  // bucket only where a walk sorted that bucket.
  int32_t LastNonzero(int64_t limit) {
    const int last_bucket = BucketAt(limit - 1);
    Candidate last{std::numeric_limits<float>::infinity(), -1, 0.0};
    const auto consider = [&](const Candidate& x) {
      if (x.e > 0 && (last.id < 0 || Before(last, x))) last = x;
    };
    for (int64_t i = 0; i < s_.kept; ++i) {
      if (s_.of[i] < last_bucket) consider(Kept(i));
    }
    if (s_.begin[last_bucket + 1] > limit) {
      for (int64_t i = s_.begin[last_bucket]; i < limit; ++i) consider(s_.bucket[i]);
    } else {
      SortBucket(last_bucket);
      for (int64_t i = s_.begin[last_bucket]; i < s_.begin[last_bucket + 1]; ++i) {
        consider(s_.bucket[i]);
      }
    }
    return last.id >= 0 ? last.id : At(0).id;
  }

 private:
  // The bucket holding position `i` of the grouping (buckets may be empty).
  int BucketAt(int64_t i) const {
    return static_cast<int>(std::upper_bound(s_.begin.begin(), s_.begin.end(), i) -
                            s_.begin.begin()) -
           1;
  }

  // The kept token at index `i` of the kept arrays, with its e.
  Candidate Kept(int64_t i) const {
    return {s_.z[i], s_.id.empty() ? static_cast<int32_t>(i) : s_.id[i],
            std::exp(s_.z[i] - s_.z_max)};
  }

  void SortBucket(int b) {
    if (s_.sorted[b]) return;
    if (!s_.grouped[b]) Group(b);
    std::sort(s_.bucket.begin() + s_.begin[b], s_.bucket.begin() + s_.begin[b + 1], Before);
    s_.sorted[b] = true;
  }

  // Copies the tokens of buckets [b, b + kGroupSpan) into their places in `bucket`.
  void Group(int b) {
    int end = b;
    while (end < std::min(b + kGroupSpan, kBuckets) && !s_.grouped[end]) ++end;
    const unsigned span = static_cast<unsigned>(end - b);
    std::array<int64_t, kGroupSpan> next;
    std::copy(s_.begin.begin() + b, s_.begin.begin() + end, next.begin());
    const uint16_t* of = s_.of.data();
    Candidate* out = s_.bucket.data();
    for (int64_t i = 0, n = s_.kept; i < n; ++i) {
      const unsigned k = static_cast<unsigned>(of[i] - b);
      if (k < span) out[next[k]++] = Kept(i);
    }
    std::fill(s_.grouped.begin() + b, s_.grouped.begin() + end, true);
  }

  Scratch& s_;
};

int32_t SampleRow(const float* logits, int64_t vocab, const RowParams& rp, Scratch& s) {
  if (!(rp.temperature > 0.0f)) return Argmax(logits, vocab);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t kept = rp.top_k > 0 && rp.top_k < vocab ? rp.top_k : vocab;
  s.kept = kept;
  s.z.resize(kept);
  float z_max = kNegInf, z_min = std::numeric_limits<float>::infinity();
  const auto z_of = [&](int64_t i) {
    const float z = logits[i] / rp.temperature;
    return std::isnan(z) ? kNegInf : z;
  };
  if (kept == vocab) {
    s.id.clear();
    for (int64_t i = 0; i < vocab; ++i) {
      const float z = s.z[i] = z_of(i);
      z_max = std::max(z_max, z);
      if (z > kNegInf) z_min = std::min(z_min, z);
    }
  } else {
    s.top_k.resize(vocab);
    for (int64_t i = 0; i < vocab; ++i) s.top_k[i] = {z_of(i), static_cast<int32_t>(i), 0.0};
    std::nth_element(s.top_k.begin(), s.top_k.begin() + kept, s.top_k.end(), Before);
    s.id.resize(kept);
    for (int64_t i = 0; i < kept; ++i) {
      const float z = s.z[i] = s.top_k[i].z;
      s.id[i] = s.top_k[i].id;
      z_max = std::max(z_max, z);
      if (z > kNegInf) z_min = std::min(z_min, z);
    }
  }
  if (z_max == kNegInf) return Argmax(logits, vocab);  // nothing but -inf and NaN

  // Buckets of equal width in z_max - z over the kept range (at most 64 nats: past that p is
  // below a double's resolution of the sum), the -inf tokens and the tail in the last. Each
  // token's p is exp(z - z_max) / total, computed again where a walk reads it; a bucket's
  // mass is its summed exp over the total.
  const double range = std::min(static_cast<double>(z_max) - z_min, 64.0);
  const double per_nat = range > 0 ? kBuckets / range : 0.0;
  std::array<int64_t, kBuckets> count{};
  s.mass.fill(0.0);
  s.grouped.fill(false);
  s.sorted.fill(false);
  s.of.resize(kept);
  s.z_max = z_max;
  double total = 0;
  for (int64_t i = 0; i < kept; ++i) {
    const double d = z_max - static_cast<double>(s.z[i]);  // +inf for -inf
    const double e = std::exp(-d);
    total += e;
    const double q = d * per_nat;
    const int b = q < kBuckets - 1 ? static_cast<int>(q) : kBuckets - 1;
    s.of[i] = static_cast<uint16_t>(b);
    ++count[b];
    s.mass[b] += e;
  }
  s.total = total;
  for (double& m : s.mass) m /= total;
  s.begin[0] = 0;
  for (int b = 0; b < kBuckets; ++b) s.begin[b + 1] = s.begin[b] + count[b];
  s.bucket.resize(kept);

  SortedWalk walk(s);
  // Top-p: the shortest sorted prefix whose mass reaches top_p (at least one token).
  int64_t prefix = kept;
  double mass = 1.0;
  if (rp.top_p < 1.0f) {
    const SortedWalk::Stop stop = walk.Walk(rp.top_p, /*inclusive=*/true, kept);
    prefix = std::max<int64_t>(stop.count, 1);
    mass = stop.cum;
  }
  const double u = SampleUniform(rp.seed, rp.step) * mass;
  const SortedWalk::Stop draw = walk.Walk(u, /*inclusive=*/false, prefix);
  if (draw.reached) return walk.At(draw.count - 1).id;
  return walk.LastNonzero(prefix);  // rounding left u at or past the summed mass
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
    Scratch scratch;
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
