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
  return absl::StrJoin(parts, ", ");
}

}  // namespace saturn::clients
