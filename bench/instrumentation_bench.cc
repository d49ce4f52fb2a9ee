// saturn-bench-instrumentation: what Saturn's always-on instrumentation (per-op device timing
// and one step record per step) costs in throughput. Two engines of the same model, one with
// EngineConfig::instrument off, run the same decode workload in alternation; the medians of
// end-to-end output tokens/s are compared. The bar: at most 2 %.
//   saturn-bench-instrumentation --model=small --batch=1 --rounds=5 --json=instr.json
#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/bench_util.h"
#include "engine/engine.h"
#include "engine/engine_flags.h"

// Besides the engine's flags (--model, --backend, ...: engine/engine_flags.h):
ABSL_FLAG(int, batch, 1, "concurrent requests");
ABSL_FLAG(int, decode_tokens, 48, "tokens generated per request");
ABSL_FLAG(int, rounds, 5, "alternating rounds per mode (median reported)");
ABSL_FLAG(std::string, json, "", "write results here");

namespace saturn {
namespace {

constexpr char kUsage[] =
    "saturn-bench-instrumentation: what Saturn's always-on instrumentation costs in throughput";

absl::StatusOr<double> TokensPerSecond(Engine* engine, int batch, int tokens) {
  const double t0 = NowUs();
  std::vector<std::unique_ptr<RequestStream>> streams;
  for (int i = 0; i < batch; ++i) {
    auto s = RequestStream::Open(engine, bench::SyntheticRequest(i * 131, 17, 16, tokens));
    if (!s.ok()) return s.status();
    streams.push_back(std::move(*s));
  }
  for (auto& s : streams) {
    TokenEvent fin = s->Drain(nullptr);
    if (fin.finish_reason == FinishReason::kError) return absl::InternalError(fin.error);
  }
  return double(batch) * tokens / ((NowUs() - t0) * 1e-6);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main() {
  if (!bench::FlagInRange("batch", absl::GetFlag(FLAGS_batch), 1, 4096) ||
      !bench::FlagInRange("decode_tokens", absl::GetFlag(FLAGS_decode_tokens), 1, 1 << 20) ||
      !bench::FlagInRange("rounds", absl::GetFlag(FLAGS_rounds), 1, 1000)) {
    return 2;
  }
  EngineConfig cfg = EngineConfigFromFlags();
  const int batch = absl::GetFlag(FLAGS_batch), tokens = absl::GetFlag(FLAGS_decode_tokens);
  cfg.max_num_seqs_limit = std::max(batch, 1);
  cfg.options.max_num_seqs = cfg.max_num_seqs_limit;
  cfg.max_model_len = 16 + tokens + 16;
  EngineConfig off = cfg;
  off.instrument = false;
  auto on_engine = Engine::Create(cfg);
  auto off_engine = Engine::Create(off);
  if (!on_engine.ok() || !off_engine.ok()) {
    std::fprintf(stderr, "engine: %s\n",
                 (!on_engine.ok() ? on_engine.status() : off_engine.status()).ToString().c_str());
    return 1;
  }
  std::vector<double> on, offv;
  for (int r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    for (bool instrumented : {true, false}) {
      Engine* e = instrumented ? on_engine->get() : off_engine->get();
      auto tps = TokensPerSecond(e, batch, tokens);
      if (!tps.ok()) {
        std::fprintf(stderr, "round %d: %s\n", r, tps.status().ToString().c_str());
        return 1;
      }
      (instrumented ? on : offv).push_back(*tps);
      std::fprintf(stderr, "round %d instrumentation %-3s %.2f tok/s\n", r,
                   instrumented ? "on" : "off", *tps);
    }
  }
  const double m_on = Median(on), m_off = Median(offv);
  const double cost = 1.0 - m_on / m_off;
  std::printf(
      "%s batch %d on %s: instrumented %.2f tok/s, uninstrumented %.2f tok/s, cost %.2f %%\n",
      cfg.model.c_str(), batch, (*on_engine)->info().device_name.c_str(), m_on, m_off, 100 * cost);
  nlohmann::json out = {{"model", cfg.model},
                        {"backend", (*on_engine)->info().backend},
                        {"batch", batch},
                        {"instrumented_tokens_per_s", on},
                        {"uninstrumented_tokens_per_s", offv},
                        {"median_instrumented", m_on},
                        {"median_uninstrumented", m_off},
                        {"cost_fraction", cost}};
  return bench::WriteJson(out, absl::GetFlag(FLAGS_json));
}

}  // namespace
}  // namespace saturn

int main(int argc, char** argv) {
  return saturn::bench::RunTool(argc, argv, saturn::kUsage, saturn::Main);
}
