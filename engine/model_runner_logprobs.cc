// The model runner's steps that ask for logprobs: the sampled rows' logits downloaded before
// sampling, and prompt rows through the final norm and LM head again (model_runner.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/logprobs.h"
#include "engine/model_runner.h"
#include "engine/model_runner_state.h"
#include "kernels/base/status_macros.h"

namespace saturn {

absl::Status ModelRunner::SampleWithLogprobs(const StepPlan& plan, int rows, RunnerOutput* out) {
  Buffers& b = *buf_;
  const int vocab = model_.vocab_size;
  out->logprobs.assign(plan.seqs.size(), SeqLogprobs{});
  // Every sampled row is downloaded (one copy; rows are contiguous), then sampled as usual.
  b.h_logits.resize(static_cast<size_t>(rows) * vocab);
  if (rows > 0) {
    RETURN_IF_ERROR(backend_->Download(b.logits.View(DType::kF32, rows, vocab), b.h_logits.data()));
  }
  RETURN_IF_ERROR(SampleRows(rows));
  return PromptLogprobs(plan, out);
}

absl::Status ModelRunner::PromptLogprobs(const StepPlan& plan, RunnerOutput* out) {
  Buffers& b = *buf_;
  const int vocab = model_.vocab_size;
  // (seq index, index into its targets) of every prompt row that asked, in plan order.
  std::vector<std::pair<int, int>> asks;
  std::vector<int32_t> rows;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& s = plan.seqs[i];
    for (size_t j = 0; j < s.prompt_logprob_targets.size(); ++j) {
      asks.emplace_back(static_cast<int>(i), static_cast<int>(j));
      rows.push_back(b.h_query_start[i] + s.prompt_logprob_row + static_cast<int>(j));
    }
  }
  const int T = b.h_query_start[plan.seqs.size()];
  std::vector<float> host;
  for (size_t c0 = 0; c0 < asks.size(); c0 += b.max_seqs) {
    const int c = static_cast<int>(std::min<size_t>(b.max_seqs, asks.size() - c0));
    b.h_logprob_rows.assign(rows.begin() + c0, rows.begin() + c0 + c);
    const Tensor idx = b.logprob_rows.View(DType::kI32, 1, c);
    RETURN_IF_ERROR(backend_->Upload(b.h_logprob_rows.data(), idx));
    // The workers compute their slices of these rows' logits from the step just run.
    if (config_.tp_size > 1) RETURN_IF_ERROR(ShareLogitsRows(T, b.h_logprob_rows));
    RETURN_IF_ERROR(LogitsOfRows(T, idx));
    const Tensor logits = b.logits.View(DType::kF32, c, vocab);
    host.resize(static_cast<size_t>(c) * vocab);
    RETURN_IF_ERROR(backend_->Download(logits, host.data()));
    for (int r = 0; r < c; ++r) {
      const auto [i, j] = asks[c0 + r];
      const ScheduledSeq& s = plan.seqs[i];
      out->logprobs[i].prompt.push_back(ComputeLogprobs(
          &host[size_t(r) * vocab], vocab, s.prompt_logprob_targets[j], s.prompt_logprobs));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RunnerOutput> ModelRunner::ExecuteWithLogits(const StepPlan& plan,
                                                            std::vector<float>* logits) {
  RunnerOutput out;
  if (launched_) return absl::FailedPreconditionError("ExecuteWithLogits: a step is launched");
  backend_->BeginStep(true);
  ASSIGN_OR_RETURN(const int rows, PrepareInputs(plan, 0, {}));
  int num_tokens, max_query, max_context;
  PlanBounds(plan, &num_tokens, &max_query, &max_context);
  RETURN_IF_ERROR(Forward(num_tokens, static_cast<int>(plan.seqs.size()), rows, max_query,
                          max_context, /*keep_logits=*/true));
  backend_->MarkStepEnd();
  logits->resize(static_cast<size_t>(rows) * model_.vocab_size);
  if (rows > 0) {
    RETURN_IF_ERROR(backend_->Download(buf_->logits.View(DType::kF32, rows, model_.vocab_size),
                                       logits->data()));
  }
  ASSIGN_OR_RETURN(out.timing, backend_->EndStep());
  if (config_.tp_size > 1) LogTpStep(out.timing);
  return out;
}

}  // namespace saturn
