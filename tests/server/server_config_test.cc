// ServerConfig::Validate names the flag to fix; ApplyEngineFlags converts units and limits.
#include "server/server_config.h"

#include <gtest/gtest.h>

namespace saturn {
namespace {

ServerConfig Valid() {
  ServerConfig c;
  c.engine.model = "tiny";
  c.engine.backend = "cpu";
  return c;
}

void ExpectNames(const ServerConfig& c, const std::string& flag) {
  absl::Status s = c.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << flag;
  EXPECT_NE(s.message().find(flag), std::string::npos) << s.message();
}

TEST(ServerConfigTest, DefaultsAreValid) {
  EXPECT_TRUE(Valid().Validate().ok()) << Valid().Validate();
  ServerConfig c = Valid();
  c.listen = "[::]:0";
  EXPECT_TRUE(c.Validate().ok());
  c.listen = "unix:/tmp/saturn.sock";
  EXPECT_TRUE(c.Validate().ok());
}

TEST(ServerConfigTest, BadFlagsNameTheFlag) {
  ServerConfig c = Valid();
  c.http_port = 70000;
  ExpectNames(c, "--http_port");
  c.http_port = -2;
  ExpectNames(c, "--http_port");
  c.http_port = 8000;
  c.metrics_port = 8000;
  ExpectNames(c, "--http_port");
  c.http_port = -1;  // two "any free port"s never collide
  c.metrics_port = -1;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c = Valid();
  c.served_model_name = "a\"b";
  ExpectNames(c, "--served_model_name");
  c.served_model_name = "   ";
  ExpectNames(c, "--served_model_name");
  c = Valid();
  c.probe_steps_ms = -1;
  ExpectNames(c, "--probe_steps_ms");
  c.probe_steps_ms = 1e9;
  ExpectNames(c, "--probe_steps_ms");
  c.probe_steps_ms = 0;  // off is valid
  EXPECT_TRUE(c.Validate().ok());
  c = Valid();
  c.listen = "nohostport";
  ExpectNames(c, "--listen");
  c = Valid();
  c.listen = "127.0.0.1:70000";
  ExpectNames(c, "--listen");
  c = Valid();
  c.listen = "127.0.0.1:http";
  ExpectNames(c, "--listen");
  c = Valid();
  c.engine.backend = "tpu";
  ExpectNames(c, "--backend");
  c = Valid();
  c.engine.event_thread = "yes";
  ExpectNames(c, "--event_thread");
  c.engine.event_thread = "17";
  ExpectNames(c, "--event_thread");
  c.engine.event_thread = "4";
  EXPECT_TRUE(c.Validate().ok());
  c = Valid();
  c.engine.async_scheduling = "maybe";
  ExpectNames(c, "--async_scheduling");
  c.engine.async_scheduling = "on";
  EXPECT_TRUE(c.Validate().ok());
  c = Valid();
  c.engine.model = "";
  ExpectNames(c, "--model");
  c = Valid();
  c.engine.num_threads = -1;
  ExpectNames(c, "--threads");
  c = Valid();
  c.engine.options.max_num_seqs = 0;
  ExpectNames(c, "--max_num_seqs");
  c = Valid();
  c.engine.options.max_num_batched_tokens = -2;
  ExpectNames(c, "--max_num_batched_tokens");
  c = Valid();
  c.engine.max_model_len = -1;
  ExpectNames(c, "--max_model_len");
  c = Valid();
  c.engine.max_queued_requests = -1;
  ExpectNames(c, "--max_queued_requests");
  c = Valid();
  c.shutdown_grace = absl::Seconds(-1);
  ExpectNames(c, "--shutdown_grace");
  c = Valid();
  c.engine.options.max_num_seqs = 64;
  c.engine.max_num_seqs_limit = 8;
  ExpectNames(c, "--max_num_seqs_limit");
  // The limits themselves, named before the options they bound (-1 named --max_num_seqs).
  for (const int limit : {-1, 0, kMaxNumSeqsLimit + 1, 2147483647}) {
    c = Valid();
    c.engine.max_num_seqs_limit = limit;
    ExpectNames(c, "--max_num_seqs_limit");
  }
  c = Valid();
  c.engine.max_num_batched_tokens_limit = kMaxNumBatchedTokensLimit + 1;
  ExpectNames(c, "--max_num_batched_tokens_limit");
  c = Valid();
  c.engine.num_threads = 100000;  // the pool capped it silently at 4096
  ExpectNames(c, "--threads");
}

TEST(ServerConfigTest, ApplyEngineFlagsConvertsUnitsAndRaisesLimits) {
  EngineConfig e;
  ApplyEngineFlags(/*max_num_seqs=*/512, /*max_num_batched_tokens=*/1024, /*cuda_graphs=*/true,
                   /*kv_cache_mb=*/3, /*max_num_seqs_limit=*/0,
                   /*max_num_batched_tokens_limit=*/0, &e);
  EXPECT_EQ(e.options.max_num_seqs, 512);
  EXPECT_EQ(e.max_num_seqs_limit, 512);
  EXPECT_EQ(e.options.max_num_batched_tokens, 1024);
  EXPECT_EQ(e.max_num_batched_tokens_limit, EngineConfig().max_num_batched_tokens_limit);
  EXPECT_TRUE(e.options.cuda_graphs);
  EXPECT_EQ(e.kv_cache_bytes, size_t{3} << 20);

  EngineConfig f;
  ApplyEngineFlags(8, 256, false, 0, /*max_num_seqs_limit=*/32,
                   /*max_num_batched_tokens_limit=*/4096, &f);
  EXPECT_EQ(f.max_num_seqs_limit, 32);
  EXPECT_EQ(f.max_num_batched_tokens_limit, 4096);
  EXPECT_EQ(f.kv_cache_bytes, 0u);
}

}  // namespace
}  // namespace saturn
