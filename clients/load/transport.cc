// The count of live stream calls (transport.h), kept by the base class of every call.
#include "clients/load/transport.h"

#include <atomic>

namespace saturn::clients {
namespace {
std::atomic<int64_t> g_live_calls{0};
}  // namespace

StreamCall::StreamCall() { g_live_calls.fetch_add(1); }
StreamCall::~StreamCall() { g_live_calls.fetch_sub(1); }

int64_t LiveStreamCalls() { return g_live_calls.load(); }

}  // namespace saturn::clients
