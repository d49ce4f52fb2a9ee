// ReadSchedStat and friends (schedstat.h).
#include "kernels/schedstat.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace saturn {

namespace {

// "run_ns wait_ns timeslices" from an open schedstat file.
SchedStat ParseFd(int fd) {
  SchedStat s;
  char buf[128];
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return s;
  buf[n] = '\0';
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

}  // namespace

SchedStat ReadSchedStat(const char* path) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const SchedStat s = ParseFd(fd);
  close(fd);
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

int CurrentThreadId() { return static_cast<int>(syscall(SYS_gettid)); }

ThreadSchedSet::~ThreadSchedSet() {
  for (int fd : fds_) close(fd);
}

bool ThreadSchedSet::Track(int tid) {
  for (int t : tids_) {
    if (t == tid) return true;
  }
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/schedstat";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  if (!ParseFd(fd).available) {
    close(fd);
    return false;
  }
  tids_.push_back(tid);
  fds_.push_back(fd);
  return true;
}

SchedStat ThreadSchedSet::Read() const {
  SchedStat total;
  for (int fd : fds_) {
    const SchedStat s = ParseFd(fd);
    if (!s.available) continue;
    total.run_ns += s.run_ns;
    total.wait_ns += s.wait_ns;
    total.available = true;
  }
  return total;
}

}  // namespace saturn
