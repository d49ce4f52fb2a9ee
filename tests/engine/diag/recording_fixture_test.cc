// Recordings of real servers kept in tests/data/recordings/ (README.md there says how each was
// made), judged offline: each must get the verdict and top action its server gave, so a rule
// change that moves a known verdict shows here, on the steps of the machine that recorded it.
// A change meant to move one re-records it (or updates its README's expectation) on purpose.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/diag/diagnostics_session.h"
#include "engine/diag/recording.h"

namespace saturn {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> Fixtures() {
  std::vector<fs::path> out;
  const fs::path dir = fs::path(SATURN_SOURCE_DIR) / "tests" / "data" / "recordings";
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".json") out.push_back(e.path());
  }
  return out;
}

TEST(RecordingFixtureTest, EachRecordedServerIsJudgedTheSameOffline) {
  const std::vector<fs::path> files = Fixtures();
  ASSERT_GE(files.size(), 2u);
  for (const fs::path& path : files) {
    SCOPED_TRACE(path.filename().string());
    std::ifstream f(path);
    std::stringstream text;
    text << f.rdbuf();
    absl::StatusOr<Recording> rec = RecordingFromJson(text.str());
    ASSERT_TRUE(rec.ok()) << rec.status();
    ASSERT_FALSE(rec->bottleneck.empty());
    DiagnosticsSession session("test");
    session.StartOffline(rec->calibration);
    const DiagnosticsReport r = session.BuildReport(rec->input);
    EXPECT_EQ(BottleneckName(r.verdict.bottleneck), rec->bottleneck) << r.verdict.summary;
    EXPECT_EQ(r.plan.actions.empty() ? "" : r.plan.actions.front().what, rec->top_action)
        << r.plan.note;
    EXPECT_GT(r.profile.steps, 0);
  }
}

}  // namespace
}  // namespace saturn
