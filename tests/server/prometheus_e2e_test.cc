// A real Prometheus (Debian's `prometheus` package) scrapes a live server's /metrics; the test
// then asks Prometheus' HTTP API for the serving series (counters equal to the requests sent,
// latency quantiles from the histograms) and the diagnostics series (one bottleneck class,
// MFU/MBU/busy), and runs every expression of docs/grafana-dashboard.json through its PromQL
// engine. Skips with a plain message where the prometheus binary is not installed.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "absl/strings/str_replace.h"
#include "tests/server/dashboard_util.h"
#include "tests/server/diagnostics_test_util.h"

namespace saturn::testing {
namespace {

std::string FindPrometheus() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    std::string p = std::string(dir) + "/prometheus";
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// A loopback port that was free a moment ago (Prometheus cannot report one it picked).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class PrometheusProcess {
 public:
  // Scrapes 127.0.0.1:`target_port` every second.
  bool Start(const std::string& binary, int target_port) {
    dir_ = ::testing::TempDir() + "/saturn_prom_" + std::to_string(getpid());
    std::filesystem::create_directories(dir_ + "/data");
    std::ofstream(dir_ + "/prometheus.yml")
        << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        << "scrape_configs:\n  - job_name: saturn\n    static_configs:\n"
        << "      - targets: ['127.0.0.1:" << target_port << "']\n";
    for (int attempt = 0; attempt < 3 && pid_ <= 0; ++attempt) {
      port_ = FreePort();
      const std::string log = dir_ + "/prometheus.log";
      const pid_t pid = fork();
      if (pid == 0) {
        FILE* f = freopen(log.c_str(), "w", stderr);
        (void)f;
        const std::string cfg = "--config.file=" + dir_ + "/prometheus.yml";
        const std::string data = "--storage.tsdb.path=" + dir_ + "/data";
        const std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(port_);
        execl(binary.c_str(), binary.c_str(), cfg.c_str(), data.c_str(), listen.c_str(),
              static_cast<char*>(nullptr));
        _exit(127);
      }
      pid_ = pid;
      if (!WaitReady()) Stop();
    }
    return pid_ > 0;
  }

  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  ~PrometheusProcess() {
    Stop();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // GET /api/v1/query; the parsed "data" on success, null (and the error in `error`) else.
  nlohmann::json Query(const std::string& promql, std::string* error = nullptr) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    auto res = c.Get("/api/v1/query", httplib::Params{{"query", promql}}, httplib::Headers{});
    if (!res) {
      if (error) *error = httplib::to_string(res.error());
      return nullptr;
    }
    nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
    if (j.is_discarded() || j.value("status", "") != "success") {
      if (error) *error = res->body;
      return nullptr;
    }
    return j["data"];
  }

  // The single value of an instant vector query with one series; NaN otherwise.
  double Scalar(const std::string& promql) {
    nlohmann::json d = Query(promql);
    if (d.is_null() || d["result"].size() != 1) return std::nan("");
    return std::stod(d["result"][0]["value"][1].get<std::string>());
  }

  // Polls `promql` until `ok(value)` or `seconds` pass.
  template <typename Pred>
  bool WaitFor(const std::string& promql, Pred ok, int seconds = 60) {
    for (int i = 0; i < seconds * 5; ++i) {
      if (ok(Scalar(promql))) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  std::string log() const { return Slurp(dir_ + "/prometheus.log"); }

 private:
  bool WaitReady() {
    for (int i = 0; i < 300; ++i) {
      httplib::Client c("127.0.0.1", port_);
      c.set_connection_timeout(1, 0);
      if (auto r = c.Get("/-/ready"); r && r->status == 200) return true;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;  // exited (port taken?)
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  std::string dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

TEST(PrometheusE2ETest, ScrapesServingAndDiagnosticsSeries) {
  const std::string binary = FindPrometheus();
  if (binary.empty()) {
    GTEST_SKIP() << "prometheus is not installed (Debian package `prometheus`; tests/run_all.sh "
                    "installs it where it can): skipping the real-Prometheus test";
  }
  ServerConfig config = DiagConfig();
  config.metrics_port = -1;
  auto server = StartServer(config);
  ASSERT_NE(server, nullptr);
  PrometheusProcess prom;
  ASSERT_TRUE(prom.Start(binary, server->app->metrics_port())) << prom.log();

  // The target is up and scraped before any request, so rate() sees the counters rise.
  ASSERT_TRUE(prom.WaitFor("up{job=\"saturn\"}", [](double v) { return v == 1; })) << prom.log();
  constexpr int kRequests = 4, kPrompt = 8, kTokens = 6;
  for (int round = 0; round < 2; ++round) {
    for (const StreamResult& r : RunConcurrent(server->stub.get(), kRequests, kPrompt, kTokens)) {
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // one scrape in between
  }
  const double total = 2.0 * kRequests * kTokens;
  ASSERT_TRUE(prom.WaitFor("saturn:generation_tokens_total", [&](double v) { return v == total; }))
      << "Prometheus never saw " << total << " generated tokens; last value "
      << prom.Scalar("saturn:generation_tokens_total");

  // Serving series.
  EXPECT_EQ(prom.Scalar("saturn:prompt_tokens_total"), 2.0 * kRequests * kPrompt);
  EXPECT_EQ(prom.Scalar("sum(saturn:request_success_total{finished_reason=\"length\"})"),
            2.0 * kRequests);
  EXPECT_EQ(prom.Scalar("saturn:time_to_first_token_seconds_count"), 2.0 * kRequests);
  for (const char* h :
       {"saturn:time_to_first_token_seconds", "saturn:request_time_per_output_token_seconds",
        "saturn:inter_token_latency_seconds", "saturn:e2e_request_latency_seconds"}) {
    const double p50 = prom.Scalar(std::string("histogram_quantile(0.5, sum by (le) (rate(") + h +
                                   "_bucket[5m])))");
    EXPECT_TRUE(std::isfinite(p50) && p50 > 0) << h << " p50 " << p50;
  }
  EXPECT_GT(prom.Scalar("rate(saturn:generation_tokens_total[5m])"), 0);
  EXPECT_GE(prom.Scalar("saturn:kv_cache_usage_perc"), 0);
  EXPECT_GE(prom.Scalar("saturn:num_requests_waiting"), 0);

  // Diagnostics series: exactly one bottleneck class is set; MFU/MBU/busy are shares.
  nlohmann::json cls = prom.Query("saturn:bottleneck_class == 1");
  ASSERT_FALSE(cls.is_null());
  ASSERT_EQ(cls["result"].size(), 1u) << cls.dump();
  const std::string verdict = cls["result"][0]["metric"].value("class", "");
  EXPECT_TRUE(verdict == "UNKNOWN" || verdict == "UNDERLOADED" || verdict == "LAUNCH_BOUND" ||
              verdict == "MEMORY_BOUND" || verdict == "COMPUTE_BOUND" || verdict == "HOST_BOUND")
      << verdict;
  for (const char* g : {"saturn:mfu", "saturn:mbu", "saturn:busy_fraction"}) {
    const double v = prom.Scalar(g);
    EXPECT_TRUE(v >= 0 && v <= 1.5) << g << " " << v;
  }
  EXPECT_GT(prom.Scalar("saturn:calibrated_gemm_flops"), 0);

  // Every dashboard expression is valid PromQL to a real Prometheus, with Grafana's
  // variables bound as Grafana would bind them.
  for (const std::string& e : DashboardExpressions()) {
    std::string q = absl::StrReplaceAll(e, {{"$__rate_interval", "5m"}, {"$instance", ".*"}});
    if (q.rfind("label_values(", 0) == 0) {  // a Grafana templating function, not PromQL
      q = q.substr(13, q.find(',') - 13);
    }
    std::string error;
    nlohmann::json d = prom.Query(q, &error);
    ASSERT_FALSE(d.is_null()) << "`" << q << "`: " << error;
    EXPECT_FALSE(d["result"].empty()) << "`" << q << "` returned no series";
  }
}

}  // namespace
}  // namespace saturn::testing
