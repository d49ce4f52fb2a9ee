// ValidateRequest: each rule rejects with InvalidArgument naming the field and its limit.
#include "engine/request.h"

#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace saturn {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr ModelLimits kLimits{/*vocab_size=*/100, /*max_model_len=*/64};

GenerateRequest Good() {
  GenerateRequest r;
  r.prompt = {1, 2, 3, 99};
  r.sampling.max_tokens = 8;
  return r;
}

// Returns the error message, failing the test if the status is not InvalidArgument.
std::string Reject(const GenerateRequest& r) {
  const absl::Status s = ValidateRequest(r, kLimits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(ValidateRequestTest, AcceptsGoodRequest) {
  EXPECT_TRUE(ValidateRequest(Good(), kLimits).ok());
}

TEST(ValidateRequestTest, AcceptsBoundaries) {
  GenerateRequest r = Good();
  r.prompt = {0, 99};
  r.sampling.max_tokens = 62;  // 2 + 62 == 64 exactly
  r.sampling.top_p = 1.0f;
  r.sampling.temperature = 0.0f;
  r.sampling.top_k = 0;
  r.sampling.stop_token_ids = {0, 99};
  EXPECT_TRUE(ValidateRequest(r, kLimits).ok());
  r.sampling.top_p = 1e-6f;
  r.sampling.temperature = 5.0f;
  r.sampling.top_k = 40;
  EXPECT_TRUE(ValidateRequest(r, kLimits).ok());
}

TEST(ValidateRequestTest, EmptyPrompt) {
  GenerateRequest r = Good();
  r.prompt.clear();
  EXPECT_EQ(Reject(r), "prompt: must contain at least one token");
}

TEST(ValidateRequestTest, PromptTokenOutsideVocabulary) {
  GenerateRequest r = Good();
  r.prompt[2] = 100;
  EXPECT_EQ(Reject(r), "prompt[2]: token id 100 is outside the vocabulary [0, 100)");
  r.prompt[2] = -1;
  EXPECT_EQ(Reject(r), "prompt[2]: token id -1 is outside the vocabulary [0, 100)");
}

TEST(ValidateRequestTest, MaxTokensBelowOne) {
  for (int m : {0, -5}) {
    GenerateRequest r = Good();
    r.sampling.max_tokens = m;
    EXPECT_THAT(Reject(r), AllOf(HasSubstr("max_tokens"), HasSubstr("at least 1")));
  }
}

TEST(ValidateRequestTest, PromptPlusMaxTokensExceedsContext) {
  GenerateRequest r = Good();
  r.sampling.max_tokens = 61;  // 4 + 61 = 65 > 64
  EXPECT_EQ(Reject(r),
            "max_tokens: prompt length 4 + max_tokens 61 exceeds the model context of 64 tokens");
  r.sampling.max_tokens = std::numeric_limits<int>::max();  // must not overflow into a pass
  EXPECT_THAT(Reject(r), HasSubstr("exceeds the model context of 64 tokens"));
}

TEST(ValidateRequestTest, TopPOutsideRange) {
  for (float p : {0.0f, -0.5f, 1.0001f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
    GenerateRequest r = Good();
    r.sampling.top_p = p;
    EXPECT_THAT(Reject(r), AllOf(HasSubstr("top_p"), HasSubstr("(0, 1]"))) << p;
  }
}

TEST(ValidateRequestTest, BadTemperature) {
  for (float t : {-0.1f, std::nanf(""), std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity()}) {
    GenerateRequest r = Good();
    r.sampling.temperature = t;
    EXPECT_THAT(Reject(r), AllOf(HasSubstr("temperature"), HasSubstr(">= 0"))) << t;
  }
}

TEST(ValidateRequestTest, RejectedValuesArePrintedInFull) {
  GenerateRequest r = Good();
  r.sampling.top_p = std::nextafter(1.0f, 2.0f);  // %g printed "got 1"
  EXPECT_THAT(Reject(r), HasSubstr("got 1.00000012"));
}

TEST(EffectiveSamplingTest, TemperaturesBelowTheThresholdBecomeGreedy) {
  SamplingParams s;
  for (const float t : {0.0f, 1e-45f, 1e-38f, 9.9e-6f}) {
    s.temperature = t;
    EXPECT_EQ(EffectiveSampling(s).temperature, 0.0f) << t;
  }
  for (const float t : {kGreedyBelowTemperature, 0.5f, 3e38f}) {
    s.temperature = t;
    EXPECT_EQ(EffectiveSampling(s).temperature, t) << t;
  }
}

TEST(ValidateRequestTest, NegativeTopK) {
  GenerateRequest r = Good();
  r.sampling.top_k = -1;
  EXPECT_THAT(Reject(r), AllOf(HasSubstr("top_k"), HasSubstr(">= 0"), HasSubstr("-1")));
}

TEST(ValidateRequestTest, StopTokenOutsideVocabulary) {
  GenerateRequest r = Good();
  r.sampling.stop_token_ids = {5, 100};
  EXPECT_EQ(Reject(r), "stop_token_ids[1]: token id 100 is outside the vocabulary [0, 100)");
  r.sampling.stop_token_ids = {-3};
  EXPECT_EQ(Reject(r), "stop_token_ids[0]: token id -3 is outside the vocabulary [0, 100)");
}

TEST(FinishReasonNameTest, NamesEveryReason) {
  EXPECT_STREQ(FinishReasonName(FinishReason::kNone), "none");
  EXPECT_STREQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_STREQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_STREQ(FinishReasonName(FinishReason::kCancelled), "cancelled");
  EXPECT_STREQ(FinishReasonName(FinishReason::kError), "error");
}

}  // namespace
}  // namespace saturn
