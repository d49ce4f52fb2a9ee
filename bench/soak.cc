// saturn-soak: a bounded soak of one saturn-server process on loopback (issue 10). It starts
// the server, then for --duration_s runs --clients client threads that mix, at random from a
// fixed seed: complete streams, streams cancelled after a few tokens, streams whose deadline
// expires mid-generation, UpdateEngineOptions changes, GetServerInfo, and bad requests
// (invalid fields, invalid UTF-8, garbage bytes). Every reply must have the status its kind
// allows (e.g. a garbage request INVALID_ARGUMENT, never UNIMPLEMENTED or INTERNAL).
// After --warmup_s it samples the server's RSS and thread count (/proc/PID/status); at the
// end it waits for the engine to go idle and checks: every KV block free, thread count and
// RSS within --tolerance / --rss_tolerance (10 %) of the post-warm-up sample, and a clean exit on
// SIGTERM. Prints a summary and writes it as JSON (--json). Exit 0 only when every check passed.
//   saturn-soak --server=build/server/saturn-server [--duration_s=600] [--json=out.json]
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/sync_stream.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/base/flags_help.h"
#include "saturn/v1/saturn.grpc.pb.h"

ABSL_FLAG(std::string, server, "", "saturn-server binary to start (required)");
ABSL_FLAG(std::string, model, "tiny", "--model of the server");
ABSL_FLAG(int, duration_s, 600, "Seconds of mixed load after the warm-up");
ABSL_FLAG(int, warmup_s, 30, "Seconds of the same load before the baseline sample");
ABSL_FLAG(int, clients, 8, "Client threads");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the clients' choices");
ABSL_FLAG(double, tolerance, 0.10, "Allowed growth of the thread count over the baseline");
ABSL_FLAG(double, rss_tolerance, 0.10, "Allowed growth of RSS over the baseline");
ABSL_FLAG(std::string, json, "", "Write the summary as JSON here");
ABSL_FLAG(std::string, log, "/tmp/saturn-soak-server.log", "The server's stderr");

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = saturn::v1;

struct ProcSample {
  double t_s = 0;
  int threads = 0;
  long rss_kb = 0;
  int kv_free = 0, kv_total = 0, running = 0, waiting = 0;
};

ProcSample ReadProc(pid_t pid) {
  ProcSample s;
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Threads:", 0) == 0) s.threads = std::stoi(line.substr(8));
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kb = std::stol(line.substr(6));
  }
  return s;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Outcomes {
  std::mutex mu;
  std::map<std::string, std::map<std::string, long>> counts;  // kind -> status -> n
  std::vector<std::string> unexpected;                        // the first 20
  long unexpected_count = 0;
  long tokens = 0;

  void Add(const std::string& kind, const grpc::Status& st, bool allowed, long tok = 0) {
    std::lock_guard<std::mutex> lock(mu);
    ++counts[kind][absl::StrCat(st.error_code())];
    tokens += tok;
    if (allowed) return;
    ++unexpected_count;
    if (unexpected.size() < 20) {
      unexpected.push_back(absl::StrCat(kind, ": code ", st.error_code(), " ", st.error_message()));
    }
  }
};

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

class Client {
 public:
  Client(const std::shared_ptr<grpc::Channel>& channel, uint64_t seed, Outcomes* out)
      : channel_(channel), stub_(v1::Saturn::NewStub(channel)), rng_(seed), out_(out) {}

  void RunUntil(Clock::time_point end) {
    while (Clock::now() < end) Step();
  }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  v1::GenerateRequest RandomRequest() {
    v1::GenerateRequest req;
    if (Uniform(0, 1) == 0) {
      req.set_prompt_text(std::string(Uniform(1, 64), static_cast<char>('a' + Uniform(0, 25))));
    } else {
      const int n = Uniform(1, 128);
      for (int i = 0; i < n; ++i) req.add_prompt_token_ids(Uniform(0, 4095));
    }
    req.set_max_tokens(Uniform(1, 96));
    req.set_ignore_eos(true);
    if (Uniform(0, 2) == 0) req.set_temperature(0.8f);
    return req;
  }

  // Reads a stream; cancels after `cancel_after` deltas when >= 0.
  void Stream(const std::string& kind, int cancel_after, int deadline_ms) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(deadline_ms > 0 ? deadline_ms : 120000));
    auto reader = stub_->Generate(&ctx, RandomRequest());
    v1::GenerateResponse msg;
    int deltas = 0;
    long tokens = 0;
    bool final_seen = false;
    while (reader->Read(&msg)) {
      if (msg.has_delta()) {
        tokens += msg.delta().token_ids_size();
        if (++deltas == cancel_after) ctx.TryCancel();
      }
      if (msg.has_final()) final_seen = true;
    }
    const grpc::Status st = reader->Finish();
    bool allowed = st.ok() ? final_seen : st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
    if (cancel_after >= 0) allowed = allowed || st.error_code() == grpc::StatusCode::CANCELLED;
    if (deadline_ms > 0)
      allowed = allowed || st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    out_->Add(kind, st, allowed, tokens);
  }

  void UpdateOptions() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::UpdateEngineOptionsRequest req;
    if (Uniform(0, 1) == 0) req.set_max_num_seqs(Uniform(1, 64));
    if (Uniform(0, 1) == 0) req.set_max_num_batched_tokens(Uniform(32, 4096));
    v1::UpdateEngineOptionsResponse resp;
    const grpc::Status st = stub_->UpdateEngineOptions(&ctx, req, &resp);
    out_->Add("update_options", st,
              st.ok() || st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  }

  void ServerInfo() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::ServerInfo info;
    const grpc::Status st = stub_->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info);
    out_->Add("server_info", st, st.ok());
  }

  // A request with one invalid field: INVALID_ARGUMENT, no engine work.
  void BadField() {
    v1::GenerateRequest req = RandomRequest();
    switch (Uniform(0, 3)) {
      case 0:
        req.set_max_tokens(0);
        break;
      case 1:
        req.set_top_p(2.0f);
        break;
      case 2:
        req.clear_prompt_text();
        req.clear_prompt_token_ids();
        break;
      default:
        req.add_stop_token_ids(1 << 20);
        break;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = stub_->Generate(&ctx, req);
    v1::GenerateResponse msg;
    while (reader->Read(&msg)) {
    }
    const grpc::Status st = reader->Finish();
    out_->Add("bad_field", st, st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }

  // Bytes that are not the method's message: INVALID_ARGUMENT (never UNIMPLEMENTED).
  void BadBytes() {
    std::string body;
    const int kind = Uniform(0, 2);
    if (kind == 0) {
      body = std::string("\x0A\x04", 2) + "a\xC3\x28" + "b";  // prompt_text, invalid UTF-8
    } else {
      body.resize(Uniform(1, 64));
      for (char& c : body) c = static_cast<char>(Uniform(0, 255));
      if (kind == 1) body[0] = '\x0A', body.push_back('\xFF');  // truncated length
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    const bool unary = Uniform(0, 1) == 0;
    grpc::Status st;
    if (unary) {
      const grpc::internal::RpcMethod rpc("/saturn.v1.Saturn/UpdateEngineOptions",
                                          grpc::internal::RpcMethod::NORMAL_RPC);
      grpc::ByteBuffer resp;
      st = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
          channel_.get(), rpc, &ctx, Bytes(body), &resp);
    } else {
      const grpc::internal::RpcMethod rpc("/saturn.v1.Saturn/Generate",
                                          grpc::internal::RpcMethod::SERVER_STREAMING);
      std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
          grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel_.get(), rpc, &ctx,
                                                                        Bytes(body)));
      grpc::ByteBuffer msg;
      while (reader->Read(&msg)) {
      }
      st = reader->Finish();
    }
    // Random bytes can happen to parse (e.g. as unknown fields): then the request's own
    // checks answer, or the update applies.
    const bool allowed = st.error_code() == grpc::StatusCode::INVALID_ARGUMENT || st.ok() ||
                         st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                         st.error_code() == grpc::StatusCode::FAILED_PRECONDITION;
    out_->Add("bad_bytes", st, allowed);
  }

  void Step() {
    const int a = Uniform(0, 99);
    if (a < 35) {
      Stream("stream", -1, 0);
    } else if (a < 50) {
      Stream("cancel", Uniform(1, 8), 0);
    } else if (a < 62) {
      Stream("deadline", -1, Uniform(5, 120));
    } else if (a < 70) {
      UpdateOptions();
    } else if (a < 76) {
      ServerInfo();
    } else if (a < 88) {
      BadField();
    } else {
      BadBytes();
    }
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Saturn::Stub> stub_;
  std::mt19937_64 rng_;
  Outcomes* out_;
};

bool Info(v1::Saturn::Stub* stub, ProcSample* s) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ServerInfo info;
  if (!stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok()) return false;
  s->kv_free = info.kv_cache().blocks_free();
  s->kv_total = info.kv_cache().num_blocks();
  s->running = info.num_running();
  s->waiting = info.num_waiting();
  return true;
}

std::string SampleJson(const ProcSample& s) {
  return absl::StrFormat(
      "{\"t_s\": %.1f, \"threads\": %d, \"rss_kb\": %d, \"kv_free\": %d, \"kv_total\": %d, "
      "\"running\": %d, \"waiting\": %d}",
      s.t_s, s.threads, s.rss_kb, s.kv_free, s.kv_total, s.running, s.waiting);
}

int Usage(const std::string& what) {
  std::cerr << "saturn-soak: " << what << std::endl;
  return 2;
}

// The flags' limits, checked before the server starts; "" when they hold.
std::string CheckFlags() {
  const std::string server = absl::GetFlag(FLAGS_server);
  if (server.empty()) return "--server: the saturn-server binary is required";
  if (access(server.c_str(), X_OK) != 0) {
    return absl::StrCat("--server: ", server, " is not an executable file");
  }
  const int clients = absl::GetFlag(FLAGS_clients);
  if (clients < 1 || clients > 1024) return absl::StrCat("--clients: 1 to 1024, got ", clients);
  const int warmup = absl::GetFlag(FLAGS_warmup_s), duration = absl::GetFlag(FLAGS_duration_s);
  if (warmup < 0 || warmup > 86400) return absl::StrCat("--warmup_s: 0 to 86400, got ", warmup);
  if (duration < 1 || duration > 7 * 86400) {
    return absl::StrCat("--duration_s: 1 to 604800, got ", duration);
  }
  for (const auto& [name, v] : {std::pair{"--tolerance", absl::GetFlag(FLAGS_tolerance)},
                                std::pair{"--rss_tolerance", absl::GetFlag(FLAGS_rss_tolerance)}}) {
    if (!(v >= 0 && v <= 100)) return absl::StrCat(name, ": 0 to 100, got ", v);
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  saturn::ParseFlagsOnly(argc, argv,
                         "saturn-soak: a bounded soak of one saturn-server process on loopback "
                         "(mixed streams, cancels, deadlines, bad requests; threads, RSS and KV "
                         "blocks checked against the post-warm-up sample)");
  if (const std::string bad = CheckFlags(); !bad.empty()) return Usage(bad);
  const std::string server = absl::GetFlag(FLAGS_server);
  const std::string log = absl::GetFlag(FLAGS_log);
  // Truncated here, not removed: the address is read from this run's log only, and a path
  // that is not a regular file (a directory, a device) is refused, never deleted.
  // (O_NONBLOCK: a FIFO without a reader fails at once instead of blocking the open.)
  const int log_fd =
      open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  struct stat st = {};
  if (log_fd < 0 || fstat(log_fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return Usage(absl::StrCat("--log: cannot write ", log, " as a regular file (",
                              log_fd < 0 ? std::strerror(errno) : "not a regular file", ")"));
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(log_fd, STDERR_FILENO);
    const std::string model = "--model=" + absl::GetFlag(FLAGS_model);
    execl(server.c_str(), server.c_str(), model.c_str(), "--backend=cpu", "--threads=1",
          "--listen=127.0.0.1:0", "--max_model_len=512", "--kv_cache_mb=32",
          "--max_queued_requests=64", "--shutdown_grace=5s", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(log_fd);
  std::string address;
  bool exited = false;
  for (int i = 0; i < 3000 && address.empty() && !exited; ++i) {
    int child_status = 0;
    exited = waitpid(pid, &child_status, WNOHANG) == pid;  // it will not start now
    const std::string text = ReadAll(log);
    if (text.find("(SERVING)") != std::string::npos) {
      const size_t at = text.find("listening on ") + 13;
      address = text.substr(at, text.find(' ', at) - at);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (address.empty()) {
    std::cerr << "saturn-soak: the server did not start" << (exited ? " (it exited)" : "") << ":\n"
              << ReadAll(log);
    if (!exited) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    return 1;
  }
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = v1::Saturn::NewStub(channel);

  Outcomes out;
  const auto start = Clock::now();
  const auto warm_end = start + std::chrono::seconds(absl::GetFlag(FLAGS_warmup_s));
  const auto end = warm_end + std::chrono::seconds(absl::GetFlag(FLAGS_duration_s));
  std::vector<std::thread> clients;
  clients.reserve(absl::GetFlag(FLAGS_clients));
  for (int i = 0; i < absl::GetFlag(FLAGS_clients); ++i) {
    clients.emplace_back([&, i] {
      // One channel per client, like independent users.
      Client c(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()),
               absl::GetFlag(FLAGS_seed) * 1000 + i, &out);
      c.RunUntil(end);
    });
  }
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  std::vector<ProcSample> timeline;
  ProcSample baseline;
  bool have_baseline = false;
  while (Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    if (!have_baseline && Clock::now() >= warm_end) {
      baseline = ReadProc(pid);
      baseline.t_s = since();
      Info(stub.get(), &baseline);
      have_baseline = true;
      timeline.push_back(baseline);
    } else if (static_cast<int>(since()) % 10 == 0) {
      ProcSample s = ReadProc(pid);
      s.t_s = since();
      Info(stub.get(), &s);
      timeline.push_back(s);
    }
  }
  for (std::thread& t : clients) t.join();

  // Idle: nothing running or waiting, every block back (bounded wait).
  ProcSample after;
  for (int i = 0; i < 600; ++i) {
    after = ReadProc(pid);
    if (Info(stub.get(), &after) && after.running == 0 && after.waiting == 0 &&
        after.kv_free == after.kv_total) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // gRPC's idle threads and the allocator settle within a few seconds of the load ending.
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const ProcSample idle_proc = ReadProc(pid);
  after.threads = idle_proc.threads;
  after.rss_kb = idle_proc.rss_kb;
  after.t_s = since();
  timeline.push_back(after);

  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  const bool clean_exit = WIFEXITED(status) && WEXITSTATUS(status) == 0;

  const double tol = absl::GetFlag(FLAGS_tolerance);
  const bool kv_ok = after.kv_total > 0 && after.kv_free == after.kv_total;
  const bool threads_ok = have_baseline && after.threads <= baseline.threads * (1 + tol);
  const double rss_tol = absl::GetFlag(FLAGS_rss_tolerance);
  const bool rss_ok = have_baseline && after.rss_kb <= baseline.rss_kb * (1 + rss_tol);
  const bool statuses_ok = out.unexpected_count == 0;
  const bool pass = kv_ok && threads_ok && rss_ok && statuses_ok && clean_exit;

  std::ostringstream text, json;
  text << absl::StrFormat("saturn-soak: %s, %d clients, warm-up %d s, then %d s of mixed load\n",
                          absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_clients),
                          absl::GetFlag(FLAGS_warmup_s), absl::GetFlag(FLAGS_duration_s));
  json << "{\n  \"model\": \"" << absl::GetFlag(FLAGS_model)
       << "\",\n  \"clients\": " << absl::GetFlag(FLAGS_clients)
       << ",\n  \"warmup_s\": " << absl::GetFlag(FLAGS_warmup_s)
       << ",\n  \"duration_s\": " << absl::GetFlag(FLAGS_duration_s) << ",\n  \"calls\": {";
  long total = 0;
  bool first_kind = true;
  for (const auto& [kind, by_code] : out.counts) {
    long n = 0;
    std::string codes;
    json << (first_kind ? "" : ",") << "\n    \"" << kind << "\": {";
    first_kind = false;
    bool first_code = true;
    for (const auto& [code, c] : by_code) {
      n += c;
      absl::StrAppend(&codes, codes.empty() ? "" : ", ", "code ", code, ": ", c);
      json << (first_code ? "" : ", ") << "\"" << code << "\": " << c;
      first_code = false;
    }
    json << "}";
    total += n;
    text << absl::StrFormat("  %-15s %7d calls (%s)\n", kind, n, codes);
  }
  json << "\n  },\n";
  text << absl::StrFormat("  %-15s %7d calls, %d tokens streamed\n", "total", total, out.tokens);
  text << absl::StrFormat("  after warm-up: %d threads, RSS %.1f MiB\n", baseline.threads,
                          baseline.rss_kb / 1024.0);
  text << absl::StrFormat(
      "  at the end (idle): %d threads (%+.1f %%), RSS %.1f MiB (%+.1f %%)\n", after.threads,
      100.0 * (after.threads - baseline.threads) / baseline.threads, after.rss_kb / 1024.0,
      100.0 * (after.rss_kb - baseline.rss_kb) / baseline.rss_kb);
  text << absl::StrFormat("  KV blocks free at the end: %d of %d\n", after.kv_free, after.kv_total);
  text << "  unexpected statuses: " << out.unexpected_count << "\n";
  for (const std::string& u : out.unexpected) text << "    " << u << "\n";
  text << "  server exit on SIGTERM: " << (clean_exit ? "0 (clean)" : "NOT clean") << "\n";
  text << "  checks: kv " << (kv_ok ? "ok" : "FAIL") << ", threads " << (threads_ok ? "ok" : "FAIL")
       << ", rss " << (rss_ok ? "ok" : "FAIL") << ", statuses " << (statuses_ok ? "ok" : "FAIL")
       << ", exit " << (clean_exit ? "ok" : "FAIL") << " -> " << (pass ? "PASS" : "FAIL") << "\n";
  json << "  \"tokens\": " << out.tokens << ",\n  \"total_calls\": " << total
       << ",\n  \"unexpected_statuses\": " << out.unexpected_count
       << ",\n  \"baseline\": " << SampleJson(baseline) << ",\n  \"end\": " << SampleJson(after)
       << ",\n  \"tolerance\": " << tol << ",\n  \"rss_tolerance\": " << rss_tol
       << ",\n  \"clean_exit\": " << (clean_exit ? "true" : "false")
       << ",\n  \"pass\": " << (pass ? "true" : "false") << ",\n  \"timeline\": [";
  for (size_t i = 0; i < timeline.size(); ++i) {
    json << (i ? "," : "") << "\n    " << SampleJson(timeline[i]);
  }
  json << "\n  ]\n}\n";
  std::cout << text.str();
  if (!absl::GetFlag(FLAGS_json).empty()) std::ofstream(absl::GetFlag(FLAGS_json)) << json.str();
  return pass ? 0 : 1;
}
