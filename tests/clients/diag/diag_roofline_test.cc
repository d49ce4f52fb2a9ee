// The roofline SVG writer on hand-built reports (no server): the document is well-formed XML
// (checked by the strict reader in diag_xml_check.h, and by xmllint where it is installed) with the
// roof, the ridge, each op class, each step and a title naming the device and the verdict; every
// text stays inside the document by the writer's width estimate, long device names included.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
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

// The text of an element as shown (the five entities the writer uses decoded).
std::string Unescape(std::string t) {
  const std::pair<const char*, const char*> kEntities[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&apos;", "'"}, {"&amp;", "&"}};
  for (const auto& [from, to] : kEntities) {
    for (size_t at = t.find(from); at != std::string::npos; at = t.find(from, at + 1)) {
      t.replace(at, std::string(from).size(), to);
    }
  }
  return t;
}

double Attr(const Element& e, const std::string& name, double fallback) {
  auto it = e.attrs.find(name);
  return it == e.attrs.end() ? fallback : std::stod(it->second);
}

// Where a <text> element's glyphs lie, by EstimateTextWidth: its anchor, font size and weight,
// from ascender (0.8 em over the baseline) to descender (0.25 em under), turned by its
// rotate(a cx cy) transform if it has one. {x0, y0, x1, y1}.
std::vector<double> TextExtent(const Element& e, double root_font_size) {
  const double size = Attr(e, "font-size", root_font_size);
  const bool bold = e.attrs.count("font-weight") > 0 && e.attrs.at("font-weight") == "bold";
  const double w = EstimateTextWidth(Unescape(e.text), size, bold);
  const double x = Attr(e, "x", 0), y = Attr(e, "y", 0);
  const std::string anchor = e.attrs.count("text-anchor") ? e.attrs.at("text-anchor") : "start";
  const double left = anchor == "middle" ? x - w / 2 : anchor == "end" ? x - w : x;
  double a = 0, cx = 0, cy = 0;
  if (e.attrs.count("transform")) {
    EXPECT_EQ(std::sscanf(e.attrs.at("transform").c_str(), "rotate(%lf %lf %lf)", &a, &cx, &cy), 3)
        << e.attrs.at("transform");
  }
  const double rad = a * M_PI / 180;
  std::vector<double> box = {INFINITY, INFINITY, -INFINITY, -INFINITY};
  for (double px : {left, left + w}) {
    for (double py : {y - 0.8 * size, y + 0.25 * size}) {
      const double rx = cx + (px - cx) * std::cos(rad) - (py - cy) * std::sin(rad);
      const double ry = cy + (px - cx) * std::sin(rad) + (py - cy) * std::cos(rad);
      box = {std::min(box[0], rx), std::min(box[1], ry), std::max(box[2], rx),
             std::max(box[3], ry)};
    }
  }
  return box;
}

// Every <text> of `svg` lies inside its width and height; returns the parsed elements.
std::vector<Element> ExpectTextInside(const std::string& svg) {
  std::vector<Element> els = Parse(svg);
  EXPECT_FALSE(els.empty());
  if (els.empty()) return els;
  const double width = Attr(els[0], "width", 0), height = Attr(els[0], "height", 0);
  const double font = Attr(els[0], "font-size", 0);
  int texts = 0;
  for (const Element& e : els) {
    if (e.name != "text") continue;
    ++texts;
    const std::vector<double> b = TextExtent(e, font);
    EXPECT_GE(b[0], 0) << "runs off the left edge: " << e.text;
    EXPECT_LE(b[2], width) << "runs off the right edge: " << e.text;
    EXPECT_GE(b[1], 0) << "runs off the top: " << e.text;
    EXPECT_LE(b[3], height) << "runs off the bottom: " << e.text;
  }
  EXPECT_GT(texts, 10);
  return els;
}

// The visible title's words in order, "|" left out (a line break may stand in for it).
std::string TitleWords(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) {
    std::istringstream in(line);
    std::string word;
    while (in >> word) {
      if (word == "|") continue;
      out += (out.empty() ? "" : " ") + word;
    }
  }
  return out;
}

std::vector<std::string> TextsOfClass(const std::vector<Element>& els, const std::string& cls) {
  std::vector<std::string> out;
  for (const Element& e : els) {
    auto it = e.attrs.find("class");
    if (e.name == "text" && it != e.attrs.end() && it->second == cls) {
      out.push_back(Unescape(e.text));
    }
  }
  return out;
}

// The topmost y of the plot (its grid, frame and roof lines) lies under the title block.
void ExpectPlotUnderTitle(const std::vector<Element>& els) {
  double top_line = INFINITY, last_heading = 0;
  for (const Element& e : els) {
    if (e.name == "line") top_line = std::min({top_line, Attr(e, "y1", 0), Attr(e, "y2", 0)});
    auto it = e.attrs.find("class");
    if (e.name == "text" && it != e.attrs.end() &&
        (it->second == "title" || it->second == "subtitle")) {
      last_heading = std::max(last_heading, Attr(e, "y", 0));
    }
  }
  EXPECT_GT(top_line, last_heading + 4);
}

TEST(RooflineSvgTest, TextStaysInsideWithTheSampleReport) {
  const std::vector<Element> els = ExpectTextInside(RooflineSvg(testing::SampleReport()));
  const std::vector<std::string> title = TextsOfClass(els, "title");
  ASSERT_EQ(title.size(), 1u);  // short enough for one line
  EXPECT_EQ(title[0],
            "Saturn roofline: Test CPU <2 threads> & more (cpu, f32) | verdict MEMORY_BOUND");
  ExpectPlotUnderTitle(els);
}

// The title ran off both edges ("turn roofline: ... COMPUTE_BOUN"): now it fits.
TEST(RooflineSvgTest, LongDeviceNameFitsInsideTheDocument) {
  v1::DiagnosticsReport r = testing::SampleReport();
  r.set_bottleneck(v1::BOTTLENECK_COMPUTE_BOUND);
  r.mutable_calibration()->set_device("AMD EPYC (2 threads) avx512, bf16 weights");
  const std::string full =
      "Saturn roofline: AMD EPYC (2 threads) avx512, bf16 weights (cpu, f32) | verdict "
      "COMPUTE_BOUND";
  ASSERT_GT(EstimateTextWidth(full, 17, true), 900) << "the case must be one that ran off";
  const std::vector<Element> els = ExpectTextInside(RooflineSvg(r));
  EXPECT_EQ(Unescape(els[1].text), full);  // <title>: whole
  const std::vector<std::string> title = TextsOfClass(els, "title");
  ASSERT_FALSE(title.empty());
  EXPECT_EQ(TitleWords(title), TitleWords({full}));  // shown whole, on one line or two
  ExpectPlotUnderTitle(els);
}

// Wider still: the device and the verdict on lines of their own (the font shrunk until the
// device takes one line).
TEST(RooflineSvgTest, LongerDeviceNameWrapsOntoTwoLines) {
  v1::DiagnosticsReport r = testing::SampleReport();
  r.mutable_calibration()->set_device(
      "AMD EPYC 9B45 128-Core Processor (2 of 256 threads) avx512 amx, bf16 weights");
  const std::vector<Element> els = ExpectTextInside(RooflineSvg(r));
  const std::vector<std::string> title = TextsOfClass(els, "title");
  ASSERT_EQ(title.size(), 2u);
  EXPECT_EQ(title[0],
            "Saturn roofline: AMD EPYC 9B45 128-Core Processor (2 of 256 threads) avx512 amx, bf16 "
            "weights (cpu, f32)");
  EXPECT_EQ(title[1], "verdict MEMORY_BOUND");
  ExpectPlotUnderTitle(els);
}

TEST(RooflineSvgTest, VeryLongDeviceNameAndNarrowDocumentStayInside) {
  v1::DiagnosticsReport r = testing::SampleReport();
  std::string device = "Vendor Accelerator";
  for (int i = 0; i < 12; ++i) device += " with a long marketing suffix " + std::to_string(i);
  device += " " + std::string(150, 'X');  // one word wider than any line
  r.mutable_calibration()->set_device(device);
  for (int width : {900, 480}) {
    RooflineOptions o;
    o.width = width;
    const std::vector<Element> els = ExpectTextInside(RooflineSvg(r, o));
    const std::vector<std::string> title = TextsOfClass(els, "title");
    EXPECT_GE(title.size(), 3u) << width;
    std::string shown;
    for (const std::string& l : title) shown += l;
    // Every character of the title is shown (the lines cut at spaces or inside the long word;
    // the line break between device and verdict stands for the "|").
    std::string want = "Saturn roofline: " + device + " (cpu, f32) | verdict MEMORY_BOUND";
    for (char drop : {' ', '|'})
      want.erase(std::remove(want.begin(), want.end(), drop), want.end());
    shown.erase(std::remove(shown.begin(), shown.end(), ' '), shown.end());
    EXPECT_EQ(shown, want) << width;
    ExpectPlotUnderTitle(els);
  }
}

TEST(TextLayoutTest, WrapTextCutsAtSpacesAndInsideLongWords) {
  const std::string text = "alpha beta gamma delta epsilon";
  EXPECT_EQ(WrapText(text, 12, false, 1000), std::vector<std::string>{text});
  const std::vector<std::string> lines =
      WrapText(text, 12, false, EstimateTextWidth("alpha beta", 12, false));
  EXPECT_EQ(lines, (std::vector<std::string>{"alpha beta", "gamma", "delta", "epsilon"}));
  EXPECT_EQ(TitleWords(lines), text);
  const std::vector<std::string> cut =
      WrapText("WWWWWWWWWW", 10, true, EstimateTextWidth("WWWW", 10, true));
  EXPECT_EQ(cut, (std::vector<std::string>{"WWWW", "WWWW", "WW"}));
  // Bold is wider than regular, capitals wider than small letters, width scales with size.
  EXPECT_GT(EstimateTextWidth("verdict", 12, true), EstimateTextWidth("verdict", 12, false));
  EXPECT_GT(EstimateTextWidth("MMMM", 12, false), EstimateTextWidth("iiii", 12, false));
  EXPECT_DOUBLE_EQ(EstimateTextWidth("abc", 24, false), 2 * EstimateTextWidth("abc", 12, false));
  EXPECT_EQ(EstimateTextWidth("", 12, false), 0);
}

TEST(XmlEscapeTest, EscapesMarkupAndDropsControlCharacters) {
  EXPECT_EQ(XmlEscape("a<b>&\"c'\x01"), "a&lt;b&gt;&amp;&quot;c&apos; ");
}

}  // namespace
}  // namespace saturn::clients
