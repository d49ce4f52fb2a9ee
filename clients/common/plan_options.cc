#include "clients/common/plan_options.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace saturn::clients {

std::string PlanOptionsRequest(const v1::PlanAction& a, const v1::EngineOptions& now,
                               v1::UpdateEngineOptionsRequest* req) {
  std::vector<std::string> parts;
  if (a.max_num_seqs() > 0 && a.max_num_seqs() != now.max_num_seqs()) {
    req->set_max_num_seqs(a.max_num_seqs());
    parts.push_back(absl::StrCat("max_num_seqs ", now.max_num_seqs(), " -> ", a.max_num_seqs()));
  }
  if (a.max_num_batched_tokens() > 0 &&
      a.max_num_batched_tokens() != now.max_num_batched_tokens()) {
    req->set_max_num_batched_tokens(a.max_num_batched_tokens());
    parts.push_back(absl::StrCat("max_num_batched_tokens ", now.max_num_batched_tokens(), " -> ",
                                 a.max_num_batched_tokens()));
  }
  if (a.cuda_graphs() != now.cuda_graphs()) {
    req->set_cuda_graphs(a.cuda_graphs());
    parts.push_back(absl::StrCat("cuda_graphs ", now.cuda_graphs() ? "on" : "off", " -> ",
                                 a.cuda_graphs() ? "on" : "off"));
  }
  if (a.prefix_caching() != now.prefix_caching()) {
    req->set_prefix_caching(a.prefix_caching());
    parts.push_back(absl::StrCat("prefix_caching ", now.prefix_caching() ? "on" : "off", " -> ",
                                 a.prefix_caching() ? "on" : "off"));
  }
  if (a.num_speculative_tokens() != now.num_speculative_tokens()) {
    req->set_num_speculative_tokens(a.num_speculative_tokens());
    parts.push_back(absl::StrCat("num_speculative_tokens ", now.num_speculative_tokens(), " -> ",
                                 a.num_speculative_tokens()));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace saturn::clients
