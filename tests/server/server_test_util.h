// Shared helpers for the server tests: a real ServerApp on a loopback port picked by the
// kernel (port 0), the CPU backend and the tiny preset, and the suite that shares one; a
// blocking stream reader; the engine's twin of a request; a bounded wait for the engine's KV
// blocks to come back; a raw buffer's bytes. Header-only, test code only.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "saturn/v1/saturn.grpc.pb.h"
#include "server/server_app.h"

namespace saturn::testing {

// Tiny model, CPU, a small KV cache (the default sizes it for 256 full-length sequences).
inline ServerConfig TinyConfig() {
  ServerConfig c;
  c.listen = "127.0.0.1:0";
  c.engine.model = "tiny";
  c.engine.backend = "cpu";
  c.engine.num_threads = 2;
  c.engine.event_thread = "on";  // what GPU servers run (auto turns it off on a 2-core machine)
  c.engine.max_model_len = 512;
  c.engine.kv_cache_bytes = size_t{48} << 20;
  c.engine.max_queued_requests = 256;
  c.shutdown_grace = absl::Seconds(30);
  c.calibration = "quick";  // many servers start: shorter calibration trials
  return c;
}

struct TestServer {
  std::unique_ptr<ServerApp> app;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Saturn::Stub> stub;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;

  Engine* engine() const { return app->engine(); }
};

// Starts gRPC (and, when `load`, the engine). Fails the test on error.
inline std::unique_ptr<TestServer> StartServer(const ServerConfig& config, bool load = true) {
  auto s = std::make_unique<TestServer>();
  s->app = std::make_unique<ServerApp>(config);
  absl::Status st = s->app->StartListening();
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok()) return nullptr;
  if (load) {
    st = s->app->LoadEngine();
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) return nullptr;
  }
  s->channel = grpc::CreateChannel(s->app->address(), grpc::InsecureChannelCredentials());
  s->stub = v1::Saturn::NewStub(s->channel);
  s->health = grpc::health::v1::Health::NewStub(s->channel);
  return s;
}

// A suite whose tests share one server, started once for the suite from MakeConfig().
template <ServerConfig (*MakeConfig)()>
class SharedServerTestWith : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = StartServer(MakeConfig()).release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr); }

  static inline TestServer* server_ = nullptr;
};
// The same with the tiny-model TinyConfig().
using SharedServerTest = SharedServerTestWith<TinyConfig>;

struct StreamResult {
  grpc::Status status;
  std::vector<int> tokens;
  std::string text;
  std::vector<v1::TokenDelta> deltas;
  std::optional<v1::GenerateFinal> final_message;
  int messages_after_final = 0;
};

// Runs one Generate stream to the end. `on_delta` (optional) sees each delta and the
// context (e.g. to cancel). `deadline` optional.
inline StreamResult RunStream(
    v1::Saturn::Stub* stub, const v1::GenerateRequest& req,
    std::optional<std::chrono::system_clock::time_point> deadline = std::nullopt,
    const std::function<void(const v1::TokenDelta&, grpc::ClientContext*)>& on_delta = nullptr) {
  StreamResult r;
  grpc::ClientContext ctx;
  if (deadline.has_value()) ctx.set_deadline(*deadline);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub->Generate(&ctx, req);
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    if (r.final_message.has_value()) ++r.messages_after_final;
    if (msg.has_delta()) {
      r.tokens.insert(r.tokens.end(), msg.delta().token_ids().begin(),
                      msg.delta().token_ids().end());
      r.text += msg.delta().text();
      r.deltas.push_back(msg.delta());
      if (on_delta) on_delta(msg.delta(), &ctx);
    } else if (msg.has_final()) {
      r.final_message = msg.final();
    }
  }
  r.status = reader->Finish();
  return r;
}

inline v1::GenerateRequest IdsRequest(const std::vector<int>& ids, int max_tokens) {
  v1::GenerateRequest req;
  for (int id : ids) req.add_prompt_token_ids(id);
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  return req;
}

// The engine's own request for what IdsRequest asks the server (ids, max_tokens, ignore_eos),
// built without the server's conversion, for tests that compare a stream with the engine.
inline GenerateRequest EngineIdsRequest(std::vector<int> ids, int max_tokens) {
  GenerateRequest req;
  req.prompt = std::move(ids);
  req.sampling.max_tokens = max_tokens;
  req.sampling.ignore_eos = true;
  return req;
}

// Polls until every KV block is free again, up to `timeout`.
inline bool WaitForKvFree(const Engine& engine,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    const KvStats kv = engine.info().kv;
    if (kv.blocks_free == kv.num_blocks) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// The bytes `buffer` holds, as one string in `bytes`; false when the buffer cannot be read.
inline bool BufferBytes(const grpc::ByteBuffer& buffer, std::string* bytes) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return false;
  bytes->clear();
  for (const grpc::Slice& s : slices) {
    bytes->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return true;
}

// A whole file's content ("" when it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline std::chrono::system_clock::time_point In(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

// grpc.health.v1 Check; nullopt when the call itself failed.
inline std::optional<grpc::health::v1::HealthCheckResponse::ServingStatus> CheckHealth(
    grpc::health::v1::Health::Stub* health, const std::string& service) {
  grpc::ClientContext ctx;
  ctx.set_deadline(In(std::chrono::seconds(10)));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  if (!health->Check(&ctx, req, &resp).ok()) return std::nullopt;
  return resp.status();
}

}  // namespace saturn::testing
