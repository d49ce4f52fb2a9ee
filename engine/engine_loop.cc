// A request's way through the engine: Submit (any thread) checks it and queues it; the engine
// loop (engine thread) drains the queue -> scheduler -> runner -> scheduler update -> events,
// and writes one StepRecord per step. See engine.h for the data path; the state it works on is
// Engine::Impl (engine_impl.h).
#include <chrono>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/engine_impl.h"
#include "engine/measure/step_record_build.h"
#include "kernels/base/clock.h"
#include "kernels/base/status_macros.h"

namespace saturn {

// ---- the facade's request calls ----------------------------------------------------------

absl::StatusOr<int64_t> Engine::Submit(GenerateRequest request, EventCallback on_event) {
  return impl_->Submit(std::move(request), std::move(on_event));
}
void Engine::Cancel(int64_t request_id, FinishReason reason) {
  impl_->Cancel(request_id, reason == FinishReason::kStop ? reason : FinishReason::kCancelled);
}

absl::StatusOr<int64_t> Engine::Impl::Submit(GenerateRequest request, EventCallback on_event) {
  RETURN_IF_ERROR(ValidateRequest(request, fixed_.limits));
  request.sampling = EffectiveSampling(std::move(request.sampling));
  const int need = (static_cast<int>(request.prompt.size()) + request.sampling.max_tokens +
                    config_.block_size - 1) /
                   config_.block_size;
  if (need > num_kv_blocks_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_tokens: prompt + max_tokens needs ", need, " KV blocks but the cache holds ",
        num_kv_blocks_, " (", num_kv_blocks_ * config_.block_size, " tokens)"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return absl::UnavailableError("engine is shutting down");
  if (config_.max_queued_requests > 0 &&
      static_cast<int>(incoming_.size()) + counters_.num_waiting >= config_.max_queued_requests) {
    return absl::ResourceExhaustedError(
        absl::StrCat("queue: ", config_.max_queued_requests,
                     " requests are already waiting (max_queued_requests); retry later"));
  }
  const int64_t id = next_id_++;
  incoming_.push_back(Pending{id, std::move(request), std::move(on_event), NowUs()});
  ++counters_.requests_submitted;
  counters_.submitted_prompt_tokens += static_cast<int64_t>(incoming_.back().request.prompt.size());
  cv_.notify_one();
  return id;
}

void Engine::Impl::Cancel(int64_t request_id, FinishReason reason) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back({request_id, reason});
  cv_.notify_one();
}

void Engine::Impl::Loop() {
  std::deque<std::function<void(bool)>> tasks;
  for (;;) {
    std::deque<Pending> incoming;
    std::vector<CancelOrder> cancels;
    bool apply_options = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!scheduler_->HasWork() && !in_flight_) {
        cv_.wait(lock, [&] {
          return stopping_ || !incoming_.empty() || !cancels_.empty() || has_pending_options_ ||
                 !between_steps_.empty();
        });
      }
      if (stopping_) break;
      incoming.swap(incoming_);
      cancels.swap(cancels_);
      apply_options = has_pending_options_;
      tasks.swap(between_steps_);
    }
    // Tasks and option changes use the runner and backend: no step may be in flight.
    if (!tasks.empty() || apply_options) FinishInFlight();
    for (auto& task : tasks) task(true);
    tasks.clear();
    DrainIncoming(&incoming, &cancels);
    if (apply_options) ApplyPendingOptions();
    Step();
  }
  FinishInFlight();
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(between_steps_);
  }
  for (auto& task : tasks) task(false);
  // Shutdown: everything still known ends as cancelled, blocks returned first.
  std::deque<Pending> incoming;
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming.swap(incoming_);
  }
  std::vector<CancelOrder> cancels;
  DrainIncoming(&incoming, &cancels);
  std::vector<int64_t> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  EndRequests(ids, FinishReason::kCancelled, "");
}

void Engine::Impl::DrainIncoming(std::deque<Pending>* incoming, std::vector<CancelOrder>* cancels) {
  for (Pending& p : *incoming) {
    Live& live = live_[p.id];
    live.on_event = std::make_shared<const EventCallback>(std::move(p.on_event));
    live.timings.arrival_us = p.arrival_us;
    live.prompt_tokens = static_cast<int>(p.request.prompt.size());
    live.wants_prompt_logprobs = p.request.sampling.prompt_logprobs >= 0;
    scheduler_->Add(p.id, p.request);
  }
  for (const FinishReason reason : {FinishReason::kCancelled, FinishReason::kStop}) {
    std::vector<int64_t> known;
    for (const CancelOrder& c : *cancels) {
      if (c.reason == reason && live_.count(c.id)) known.push_back(c.id);
    }
    EndRequests(known, reason, "");
  }
}

void Engine::Impl::ApplyPendingOptions() {
  EngineOptions o;
  {
    std::lock_guard<std::mutex> lock(mu_);
    o = pending_options_;
    has_pending_options_ = false;
  }
  scheduler_->SetLimits(o.max_num_seqs, o.max_num_batched_tokens);
  scheduler_->SetPrefixCaching(o.prefix_caching);
  scheduler_->SetSpeculativeTokens(o.num_speculative_tokens);
  absl::Status s = runner_->SetUseGraphs(o.cuda_graphs);
  if (!s.ok()) o.cuda_graphs = runner_->use_graphs();
  std::lock_guard<std::mutex> lock(mu_);
  graph_info_ = runner_->graph_info();
  options_ = o;
  options_error_ = s;
  ++options_epoch_;
  options_cv_.notify_all();
}

void Engine::Impl::Emit(int64_t id, TokenEvent ev) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& live = it->second;
  if (!ev.token_ids.empty() && live.timings.first_token_us == 0) {
    live.timings.first_token_us = ev.time_us;
    if (live.wants_prompt_logprobs) ev.prompt_logprobs = std::move(live.prompt_logprobs);
  }
  if (ev.final) {
    live.timings.finished_us = ev.time_us;
    ev.timings = live.timings;
    ev.usage.prompt_tokens = live.prompt_tokens;
  }
  outbox_.push_back(EventDelivery::Item{id, live.on_event, std::move(ev)});
  if (outbox_.back().event.final) live_.erase(it);
}

double Engine::Impl::PostEvents() {
  if (outbox_.empty()) return 0;
  EventDelivery::Batch batch;
  batch.swap(outbox_);
  return events_.Post(std::move(batch));
}

void Engine::Impl::EndRequests(const std::vector<int64_t>& ids, FinishReason reason,
                               const std::string& error) {
  int64_t cancelled = 0, failed = 0, stopped = 0;
  for (int64_t id : ids) {
    if (!live_.count(id)) continue;
    // Returns its KV blocks before the final event goes out.
    const std::optional<Usage> usage = scheduler_->Cancel(id);
    TokenEvent ev;
    if (usage.has_value()) ev.usage = *usage;  // Emit sets prompt_tokens
    ev.final = true;
    ev.finish_reason = reason;
    ev.error = error;
    ev.time_us = NowUs();
    Emit(id, std::move(ev));
    (reason == FinishReason::kError  ? failed
     : reason == FinishReason::kStop ? stopped
                                     : cancelled)++;
  }
  PostEvents();
  std::lock_guard<std::mutex> lock(mu_);
  counters_.requests_cancelled += cancelled;
  counters_.requests_failed += failed;
  counters_.requests_finished += cancelled + failed + stopped;
  counters_.num_waiting = scheduler_->num_waiting();
  counters_.num_running = scheduler_->num_running();
  kv_free_ = scheduler_->blocks().num_free();
}

void Engine::Impl::AttachLogprobs(const StepPlan& plan, RunnerOutput* out,
                                  const std::vector<RequestUpdate>& updates,
                                  std::vector<TokenEvent>* events) {
  std::unordered_map<int64_t, SeqLogprobs*> by_id;
  for (size_t i = 0; i < plan.seqs.size() && i < out->logprobs.size(); ++i) {
    SeqLogprobs& lp = out->logprobs[i];
    by_id[plan.seqs[i].request_id] = &lp;
    auto it = live_.find(plan.seqs[i].request_id);
    if (it == live_.end() || lp.prompt.empty()) continue;
    auto& kept = it->second.prompt_logprobs;
    kept.insert(kept.end(), std::make_move_iterator(lp.prompt.begin()),
                std::make_move_iterator(lp.prompt.end()));
  }
  for (size_t k = 0; k < updates.size(); ++k) {
    const RequestUpdate& u = updates[k];
    auto it = by_id.find(u.request_id);
    if (it == by_id.end()) continue;
    // One entry per row that sampled; the request kept the first new_tokens of them.
    std::vector<PositionLogprobs>& rows = it->second->sampled;
    const size_t kept = std::min(u.new_tokens.size(), rows.size());
    (*events)[k].logprobs.assign(std::make_move_iterator(rows.begin()),
                                 std::make_move_iterator(rows.begin() + kept));
  }
}

void Engine::Impl::TrackSchedThreads() {
  if (sched_complete_) return;
  std::vector<int> tids = backend_->HostThreadIds();
  tids.push_back(CurrentThreadId());
  sched_complete_ = true;
  for (int tid : tids) {
    if (tid == 0) {
      sched_complete_ = false;  // a worker not started yet: try again next step
      continue;
    }
    sched_threads_.Track(tid);
  }
}

void Engine::Impl::Step() {
  StepRecord rec;  // of the step this turn finishes
  if (config_.instrument) TrackSchedThreads();
  const SchedStat sched0 = config_.instrument ? sched_threads_.Read() : SchedStat{};
  rec.start_us = NowUs();
  StepPlan plan = scheduler_->Schedule();  // overlaps the device's step in flight, if any
  rec.schedule_us = NowUs() - rec.start_us;
  if (plan.empty() && !in_flight_) {
    // Work exists but nothing fits this step (cannot happen with validated requests, but
    // never spin): yield briefly. Not a step: no record, never shown as in flight (a report
    // built meanwhile must not count an idle engine's wake-up as busy time).
    if (scheduler_->HasWork()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    return;
  }
  step_in_flight_since_us_ = rec.start_us;  // from its start: scheduling is part of the step
  struct InFlightMark {                     // cleared on every return
    std::atomic<double>* since;
    ~InFlightMark() { *since = 0; }
  } in_flight_mark{&step_in_flight_since_us_};
  for (const ScheduledSeq& s : plan.seqs) {
    auto it = live_.find(s.request_id);
    if (it != live_.end() && it->second.timings.first_scheduled_us == 0) {
      it->second.timings.first_scheduled_us = rec.start_us;
    }
  }
  // The step in flight: wait for it. Its sampled tokens are the inputs of this plan's decodes
  // that Schedule() could not know yet (ScheduledSeq::feed_from).
  std::optional<InFlight> prev;
  absl::StatusOr<RunnerOutput> prev_out;
  if (in_flight_) {
    prev = std::move(in_flight_);
    in_flight_.reset();
    prev_out = runner_->Finish(prev->plan);
  }
  absl::Status launched;
  if (!plan.empty()) {
    const int64_t id = step_id_++;
    const bool per_op = config_.instrument && (backend_->per_op_timing_is_cheap() ||
                                               id % config_.per_op_timing_every == 0);
    std::vector<int> zeros;  // the step before failed: its requests end with it, their rows
                             // here are dropped
    const std::vector<int>* fed = &zeros;
    if (prev && prev_out.ok()) {
      fed = &prev_out->sampled;  // read in place: no copy on the step loop's path
    } else if (prev) {
      for (const ScheduledSeq& s : prev->plan.seqs) {
        if (s.sample) zeros.push_back(0);
      }
    }
    launched = runner_->Launch(plan, per_op, *fed);
    if (launched.ok()) {
      in_flight_ = InFlight{std::move(plan), id};
    } else {
      std::cerr << "saturn: step " << id << " failed: " << launched << "\n";
    }
  }
  SchedStat turn_sched0 = sched0;
  if (prev) {
    // The device runs the step just launched while the host completes the one before.
    TakeOpenTurn(&rec, &turn_sched0);
    Complete(*prev, std::move(prev_out), rec, turn_sched0);
  } else if (!async_ && in_flight_) {
    InFlight now = std::move(*in_flight_);
    in_flight_.reset();
    Complete(now, runner_->Finish(now.plan), rec, turn_sched0);
  } else if (in_flight_) {
    // The first step of a burst: no step to complete yet. The next turn's record starts here.
    open_turn_ = OpenTurn{rec.start_us, rec.schedule_us, sched0};
  }
  if (!launched.ok()) {
    // A failed step fails the requests in it (after the step before it delivered their
    // tokens); the engine keeps serving the others.
    std::vector<int64_t> ids;
    for (const ScheduledSeq& s : plan.seqs) ids.push_back(s.request_id);
    EndRequests(ids, FinishReason::kError, std::string(launched.message()));
    std::lock_guard<std::mutex> lock(mu_);
    counters_.preemptions += static_cast<int64_t>(plan.preempted.size());
  }
}

void Engine::Impl::TakeOpenTurn(StepRecord* rec, SchedStat* sched0) {
  if (!open_turn_) return;
  rec->start_us = open_turn_->start_us;
  rec->schedule_us += open_turn_->schedule_us;
  *sched0 = open_turn_->sched0;
  open_turn_.reset();
}

void Engine::Impl::FinishInFlight() {
  if (!in_flight_) return;
  StepRecord rec;
  SchedStat sched0 = config_.instrument ? sched_threads_.Read() : SchedStat{};
  rec.start_us = NowUs();
  TakeOpenTurn(&rec, &sched0);
  InFlight step = std::move(*in_flight_);
  in_flight_.reset();
  Complete(step, runner_->Finish(step.plan), rec, sched0);
}

void Engine::Impl::Complete(const InFlight& step, absl::StatusOr<RunnerOutput> out, StepRecord rec,
                            const SchedStat& sched0) {
  const StepPlan& plan = step.plan;
  if (!out.ok()) {
    // A failed step fails the requests in it; the engine keeps serving the others.
    std::cerr << "saturn: step " << step.step_id << " failed: " << out.status() << "\n";
    std::vector<int64_t> ids;
    for (const ScheduledSeq& s : plan.seqs) ids.push_back(s.request_id);
    EndRequests(ids, FinishReason::kError, std::string(out.status().message()));
    return;
  }
  const double post0 = NowUs();
  std::vector<RequestUpdate> updates = scheduler_->Update(plan, out->sampled);
  std::vector<TokenEvent> events(updates.size());
  if (!out->logprobs.empty()) AttachLogprobs(plan, &*out, updates, &events);
  int64_t generated = 0, finished = 0;
  for (size_t k = 0; k < updates.size(); ++k) {
    RequestUpdate& u = updates[k];
    TokenEvent& ev = events[k];
    ev.token_ids = std::move(u.new_tokens);
    ev.time_us = post0;
    generated += static_cast<int64_t>(ev.token_ids.size());
    if (u.finish != FinishReason::kNone) {
      ev.final = true;
      ev.finish_reason = u.finish;
      ev.usage = u.usage;
      ++finished;
    }
  }
  rec.step_id = step.step_id;
  RecordStepWork(plan, &*out, &rec);
  for (const RequestUpdate& u : updates) rec.spec_accepted_tokens += u.num_accepted;
  RecordServingState(*scheduler_, &rec);
  // The counters first, the events after: a client that has seen its final event reads
  // counters (GetServerInfo, /metrics) that already include its request.
  {
    std::lock_guard<std::mutex> lock(mu_);
    rec.options = options_;
    rec.options.cuda_graphs = runner_->use_graphs();
    counters_.generation_tokens += generated;
    counters_.requests_finished += finished;
    counters_.preemptions += static_cast<int64_t>(plan.preempted.size());
    counters_.prefix_cache_queries += plan.prefix_query_tokens;
    (plan.prefix_caching ? counters_.prefix_cache_hits : counters_.prefix_cache_missed) +=
        plan.prefix_hit_tokens;
    counters_.spec_drafts += rec.spec_verify_seqs;
    counters_.spec_draft_tokens += rec.spec_draft_tokens;
    counters_.spec_accepted_tokens += rec.spec_accepted_tokens;
    for (const RequestUpdate& u : updates) {
      if (u.finish != FinishReason::kNone) counters_.prompt_tokens += u.usage.prompt_tokens;
    }
    counters_.num_waiting = rec.queue_depth;
    counters_.num_running = rec.num_running;
    counters_.steps = step.step_id + 1;
    kv_free_ = rec.kv_blocks_free;
  }
  for (size_t k = 0; k < updates.size(); ++k) Emit(updates[k].request_id, std::move(events[k]));
  PostEvents();  // with the event thread, the callbacks run while the next step starts
  rec.end_us = NowUs();
  rec.postprocess_us = rec.end_us - post0;
  if (in_flight_ && runner_->step_queued()) {
    // This turn's schedule and postprocess ran while the device had the next step queued:
    // hidden behind it up to that step's device time (taken as this one's, as in a steady
    // decode); the rest the device waited for.
    rec.hidden_host_us = std::min(rec.schedule_us + rec.postprocess_us, rec.device_busy_us);
  }
  if (config_.instrument) {
    const SchedStat sched1 = sched_threads_.Read();
    rec.sched_known = sched0.available && sched1.available;
    if (rec.sched_known) {
      rec.sched_run_us = static_cast<double>(sched1.run_ns - sched0.run_ns) * 1e-3;
      rec.sched_wait_us = static_cast<double>(sched1.wait_ns - sched0.wait_ns) * 1e-3;
    }
    steps_.Push(std::move(rec));
  }
}

}  // namespace saturn
