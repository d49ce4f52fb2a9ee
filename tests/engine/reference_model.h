// A plain dense float64 Llama forward pass (no paging, no batching, no backend) used as the
// reference the engine's paged, batched, chunked path is checked against. Test-only.
#pragma once

#include <cmath>
#include <vector>

#include "engine/model/weights.h"

namespace saturn::testing_ref {

// y[n] = sum_k x[k] * w[n * K + k]
inline std::vector<double> MatVec(const std::vector<float>& w, const std::vector<double>& x,
                                  int n_out, size_t row_offset = 0) {
  const size_t k = x.size();
  std::vector<double> y(n_out, 0.0);
  for (int n = 0; n < n_out; ++n) {
    const float* row = w.data() + (row_offset + n) * k;
    double acc = 0;
    for (size_t i = 0; i < k; ++i) acc += double(row[i]) * x[i];
    y[n] = acc;
  }
  return y;
}

inline std::vector<double> RmsNorm(const std::vector<double>& x, const std::vector<float>& w,
                                   double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

// RoPE frequencies as transformers computes them (_compute_default_rope_parameters, then
// _compute_llama3_parameters when config.json asks for llama3 scaling), in float64, written
// from the transformers source independently of kernels/rope_params.h.
inline std::vector<double> InvFreq(const ModelConfig& m) {
  const int hd = m.head_dim;
  std::vector<double> inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[i] = 1.0 / std::pow(double(m.rope_theta), 2.0 * i / hd);
  if (m.rope_llama3_factor == 0.0f) return inv;
  const double factor = m.rope_llama3_factor, low = m.rope_low_freq_factor,
               high = m.rope_high_freq_factor, old_len = m.rope_original_max_position;
  const double low_freq_wavelen = old_len / low, high_freq_wavelen = old_len / high;
  for (double& f : inv) {
    const double wavelen = 2 * M_PI / f;
    const double llama = wavelen > low_freq_wavelen ? f / factor : f;
    const double smooth = (old_len / wavelen - low) / (high - low);
    const double smoothed = (1 - smooth) * llama / factor + smooth * llama;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    f = medium ? smoothed : llama;
  }
  return inv;
}

inline void Rope(std::vector<double>* v, int heads, int hd, int pos,
                 const std::vector<double>& inv_freq) {
  for (int h = 0; h < heads; ++h) {
    double* p = v->data() + size_t(h) * hd;
    for (int i = 0; i < hd / 2; ++i) {
      const double freq = inv_freq[i];
      const double c = std::cos(pos * freq), s = std::sin(pos * freq);
      const double a = p[i], b = p[i + hd / 2];
      p[i] = a * c - b * s;
      p[i + hd / 2] = b * c + a * s;
    }
  }
}

// Logits [T][V] for every position of `tokens`.
inline std::vector<std::vector<double>> ReferenceLogits(const ModelWeights& w,
                                                        const std::vector<int>& tokens) {
  const ModelConfig& m = w.config;
  const int d = m.hidden_size, hd = m.head_dim, hq = m.num_heads, hkv = m.num_kv_heads,
            f = m.intermediate_size, T = static_cast<int>(tokens.size());
  std::vector<std::vector<double>> h(T, std::vector<double>(d));
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < d; ++i) h[t][i] = w.embedding[size_t(tokens[t]) * d + i];
  }
  const std::vector<double> inv_freq = InvFreq(m);
  for (int l = 0; l < m.num_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    std::vector<std::vector<double>> K(T), V(T), Q(T);
    for (int t = 0; t < T; ++t) {
      auto x = RmsNorm(h[t], L.attn_norm, m.rms_norm_eps);
      Q[t] = MatVec(L.wqkv, x, hq * hd, 0);
      K[t] = MatVec(L.wqkv, x, hkv * hd, size_t(hq) * hd);
      V[t] = MatVec(L.wqkv, x, hkv * hd, size_t(hq + hkv) * hd);
      Rope(&Q[t], hq, hd, t, inv_freq);
      Rope(&K[t], hkv, hd, t, inv_freq);
    }
    for (int t = 0; t < T; ++t) {
      std::vector<double> att(size_t(hq) * hd, 0.0);
      for (int head = 0; head < hq; ++head) {
        const int kvh = head / (hq / hkv);
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += Q[t][head * hd + i] * K[j][kvh * hd + i];
          s[j] = dot / std::sqrt(double(hd));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int j = 0; j <= t; ++j) {
          for (int i = 0; i < hd; ++i) att[head * hd + i] += s[j] / sum * V[j][kvh * hd + i];
        }
      }
      auto o = MatVec(L.wo, att, d);
      for (int i = 0; i < d; ++i) h[t][i] += o[i];
      auto x = RmsNorm(h[t], L.mlp_norm, m.rms_norm_eps);
      auto gu = MatVec(L.w_gate_up, x, 2 * f);
      std::vector<double> a(f);
      for (int i = 0; i < f; ++i) a[i] = gu[i] / (1.0 + std::exp(-gu[i])) * gu[f + i];
      auto dn = MatVec(L.w_down, a, d);
      for (int i = 0; i < d; ++i) h[t][i] += dn[i];
    }
  }
  const std::vector<float>& head = m.tie_word_embeddings ? w.embedding : w.lm_head;
  std::vector<std::vector<double>> logits(T);
  for (int t = 0; t < T; ++t) {
    logits[t] = MatVec(head, RmsNorm(h[t], w.final_norm, m.rms_norm_eps), m.vocab_size);
  }
  return logits;
}

}  // namespace saturn::testing_ref
