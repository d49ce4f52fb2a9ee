// The roofline SVG writer on hand-built reports (no server): the document is well-formed XML
// (checked by the strict reader in diag_xml_check.h, and by xmllint where it is installed) with the
// roof, the ridge, each op class, each step and a title naming the device and the verdict.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "clients/diag/roofline_svg.h"
#include "tests/clients/diag/diag_test_report.h"
#include "tests/clients/diag/diag_xml_check.h"

namespace saturn::clients {
namespace {

using testing::AnyText;
using testing::ById;
using testing::Count;
using testing::Element;
using testing::Parse;
using testing::ParseXml;

TEST(XmlCheckerTest, RejectsWhatIsNotWellFormed) {
  std::vector<Element> els;
  EXPECT_EQ(ParseXml("<a x=\"1\"><b/>t &amp; u</a>", &els), "");
  for (const char* bad : {"<a><b></a></b>", "<a x=1/>", "<a>1 < 2</a>", "<a>AT&T</a>", "<a/><b/>",
                          "<a x=\"1\" x=\"2\"/>", "<a>"}) {
    els.clear();
    EXPECT_NE(ParseXml(bad, &els), "") << bad;
  }
}

TEST(RooflineSvgTest, KnownReportHasEveryElement) {
  const v1::DiagnosticsReport r = testing::SampleReport();
  const std::string svg = RooflineSvg(r);
  const std::vector<Element> els = Parse(svg);
  ASSERT_FALSE(els.empty());
  EXPECT_EQ(els[0].name, "svg");
  EXPECT_EQ(els[0].attrs.at("xmlns"), "http://www.w3.org/2000/svg");

  // Title: device (escaped in the file, intact once parsed) and verdict.
  EXPECT_NE(svg.find("Test CPU &lt;2 threads&gt; &amp; more"), std::string::npos);
  ASSERT_GE(Count(els, "title"), 1);
  EXPECT_NE(els[1].text.find("MEMORY_BOUND"), std::string::npos) << els[1].text;
  EXPECT_TRUE(AnyText(els, "verdict MEMORY_BOUND"));

  // The roof: slope up to the ridge, then flat at the ceiling; the ridge marked there.
  const Element* roof = ById(els, "roofline");
  ASSERT_NE(roof, nullptr);
  std::vector<std::pair<double, double>> pts;
  std::istringstream in(roof->attrs.at("points"));
  std::string pair;
  while (in >> pair) {
    const size_t comma = pair.find(',');
    pts.push_back({std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1))});
  }
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_LT(pts[0].first, pts[1].first);
  EXPECT_GT(pts[0].second, pts[1].second);  // rising (SVG y grows downwards)
  EXPECT_DOUBLE_EQ(pts[1].second, pts[2].second);
  const Element* ridge = ById(els, "ridge");
  ASSERT_NE(ridge, nullptr);
  EXPECT_NEAR(std::stod(ridge->attrs.at("x1")), pts[1].first, 0.11);
  EXPECT_TRUE(AnyText(els, "ridge 5.00 FLOP/B"));
  EXPECT_TRUE(AnyText(els, "compute ceiling 100 GFLOP/s"));
  EXPECT_TRUE(AnyText(els, "memory bandwidth 20.0 GB/s"));

  // Points: every step, each class with FLOPs (sampling has none and is listed instead).
  EXPECT_EQ(Count(els, "circle", "class", "step"), 20);
  EXPECT_EQ(Count(els, "circle", "class", "op-class"), 4);
  for (const char* c : {"gemm 20%", "attention 20%", "norm 20%", "elementwise 20%"}) {
    EXPECT_TRUE(AnyText(els, c)) << c;
  }
  EXPECT_TRUE(AnyText(els, "not placed (no FLOPs): sampling"));
  EXPECT_NE(ById(els, "window-point"), nullptr);
  EXPECT_TRUE(AnyText(els, "arithmetic intensity (FLOP/byte, log scale)"));
  EXPECT_TRUE(AnyText(els, "FLOP/s (log scale)"));
}

TEST(RooflineSvgTest, WithoutCalibrationOrStepsStillWellFormed) {
  v1::DiagnosticsReport r = testing::SampleReport();
  r.clear_calibration();
  r.clear_step_points();
  RooflineOptions o;
  o.device_fallback = "fallback device";
  std::vector<Element> els = Parse(RooflineSvg(r, o));
  EXPECT_EQ(ById(els, "roofline"), nullptr);
  EXPECT_TRUE(AnyText(els, "not calibrated: no roof drawn"));
  EXPECT_TRUE(AnyText(els, "fallback device"));
  EXPECT_EQ(Count(els, "circle", "class", "step"), 0);

  els = Parse(RooflineSvg(v1::DiagnosticsReport()));
  EXPECT_TRUE(AnyText(els, "UNKNOWN (no steps)"));
}

TEST(RooflineSvgTest, XmllintAcceptsIt) {
  if (access("/usr/bin/xmllint", X_OK) != 0) GTEST_SKIP() << "xmllint is not installed";
  const std::string path = ::testing::TempDir() + "/roofline_" + std::to_string(getpid()) + ".svg";
  std::ofstream(path) << RooflineSvg(testing::SampleReport());
  EXPECT_EQ(std::system(("/usr/bin/xmllint --noout " + path).c_str()), 0);
}

TEST(XmlEscapeTest, EscapesMarkupAndDropsControlCharacters) {
  EXPECT_EQ(XmlEscape("a<b>&\"c'\x01"), "a&lt;b&gt;&amp;&quot;c&apos; ");
}

}  // namespace
}  // namespace saturn::clients
