// Test helper for saturn-load's OpenAI-API tests: the URL of the HTTP front that a
// saturn-server started with --http_port=-1 (tests/clients/server_process.h StartServer) logs
// as "saturn-server: OpenAI-compatible API at http://127.0.0.1:PORT/v1". Header-only, test code.
#pragma once

#include <chrono>
#include <string>
#include <thread>

#include "tests/clients/server_process.h"

namespace saturn::clients::testing {

// "http://127.0.0.1:PORT" from the server's log, waiting up to 30 s for the line; "" if absent.
inline std::string WaitForHttpUrl(const std::string& log) {
  const std::string mark = "OpenAI-compatible API at ";
  for (int i = 0; i < 300; ++i) {
    const std::string text = ReadFile(log);
    const size_t at = text.find(mark);
    if (at != std::string::npos) {
      const size_t begin = at + mark.size();
      const size_t end = text.find_first_of(" \n", begin);
      std::string url = text.substr(begin, end - begin);
      if (url.size() > 3 && url.compare(url.size() - 3, 3, "/v1") == 0) url.resize(url.size() - 3);
      return url;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return "";
}

}  // namespace saturn::clients::testing
