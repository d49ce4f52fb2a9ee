// Local stand-ins for ABSL_RETURN_IF_ERROR / ABSL_ASSIGN_OR_RETURN, which Abseil 20220623
// (Debian 12) does not ship. Owns nothing else.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SATURN_CONCAT_INNER(a, b) a##b
#define SATURN_CONCAT(a, b) SATURN_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status saturn_status_ = (expr);          \
    if (!saturn_status_.ok()) return saturn_status_; \
  } while (0)

// `tmp` names the temporary and `lhs` may be a declaration ("auto x"): neither can be
// parenthesised, so bugprone-macro-parentheses is off for these lines.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(*tmp)
// NOLINTEND(bugprone-macro-parentheses)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(SATURN_CONCAT(saturn_statusor_, __LINE__), lhs, expr)
