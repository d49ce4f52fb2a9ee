// ReadSchedStat and friends (schedstat.h).
#include "kernels/schedstat.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace saturn {

SchedStat ReadSchedStat(const char* path) {
  SchedStat s;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return s;
  char buf[128];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return s;
  buf[n] = '\0';
  // "run_ns wait_ns timeslices"
  char* end = nullptr;
  const long long run = std::strtoll(buf, &end, 10);
  if (end == buf) return s;
  char* end2 = nullptr;
  const long long wait = std::strtoll(end, &end2, 10);
  if (end2 == end) return s;
  s.run_ns = run;
  s.wait_ns = wait;
  s.available = true;
  return s;
}

SchedStat ReadThreadSchedStat() { return ReadSchedStat("/proc/thread-self/schedstat"); }

SchedStat ReadProcessSchedStat() {
  SchedStat total;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return total;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = std::string("/proc/self/task/") + e->d_name + "/schedstat";
    const SchedStat s = ReadSchedStat(path.c_str());
    if (!s.available) continue;
    total.run_ns += s.run_ns;
    total.wait_ns += s.wait_ns;
    total.available = true;
  }
  closedir(dir);
  return total;
}

}  // namespace saturn
