// RooflineSvg (see roofline_svg.h). Layout, outside in: title and subtitle on top (wrapped
// when too wide, the plot moving down by the extra lines), the plot area with decade grid
// lines, the roof (slope up to the ridge, then the ceiling), the step dots under the op-class
// points, a legend in the plot's top-left corner, axis titles.
#include "clients/diag/roofline_svg.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "proto/render/report_text.h"

namespace saturn::clients {
namespace {

constexpr double kLeft = 90, kRight = 30, kTop = 78, kBottom = 64;
// The title's font size, the smallest it shrinks to, and the space kept clear at each side of
// the title and subtitle lines.
constexpr double kTitleSize = 17, kMinTitleSize = 11, kTextMargin = 12;

// Helvetica's advance widths (1/1000 em, from its AFM files) of ASCII 32..126, 16 a row:
//  !"#$%&'()*+,-./  0-9:;<=>?  @A-O  P-Z[\]^_  `a-o  p-z{|}~
// clang-format off
constexpr int kHelvetica[95] = {
    278, 278, 355, 556, 556, 889, 667, 191, 333, 333, 389, 584, 278, 333, 278, 278,
    556, 556, 556, 556, 556, 556, 556, 556, 556, 556, 278, 278, 584, 584, 584, 556,
    1015, 667, 667, 722, 722, 667, 611, 778, 722, 278, 500, 667, 556, 833, 722, 778,
    667, 778, 722, 667, 611, 722, 667, 944, 667, 667, 611, 278, 278, 278, 469, 556,
    333, 556, 556, 500, 556, 556, 278, 556, 556, 222, 222, 500, 222, 833, 556, 556,
    556, 556, 333, 500, 278, 556, 500, 722, 500, 500, 500, 334, 260, 334, 584};
constexpr int kHelveticaBold[95] = {
    278, 333, 474, 556, 556, 889, 722, 238, 333, 333, 389, 584, 278, 333, 278, 278,
    556, 556, 556, 556, 556, 556, 556, 556, 556, 556, 333, 333, 584, 584, 584, 611,
    975, 722, 722, 722, 722, 667, 611, 778, 722, 278, 556, 722, 611, 833, 722, 778,
    667, 778, 722, 667, 611, 722, 667, 944, 667, 667, 611, 333, 278, 333, 584, 556,
    333, 556, 611, 556, 611, 556, 333, 611, 611, 278, 278, 556, 278, 889, 611, 611,
    611, 611, 389, 556, 333, 611, 556, 778, 556, 556, 500, 389, 280, 389, 584};
// clang-format on

// A log10 axis from decade lo to decade hi onto pixels p0 .. p1.
struct Axis {
  double lo = 0, hi = 1, p0 = 0, p1 = 1;
  double Map(double v) const { return p0 + (std::log10(v) - lo) / (hi - lo) * (p1 - p0); }
};

std::string P(double px) { return absl::StrFormat("%.1f", px); }

bool Positive(double v) { return std::isfinite(v) && v > 0; }

// Whole decades around the values, at least `min_decades` wide, at most 12.
void Decades(const std::vector<double>& values, int min_decades, double* lo, double* hi) {
  double mn = INFINITY, mx = -INFINITY;
  for (double v : values) {
    if (!Positive(v)) continue;
    mn = std::min(mn, v);
    mx = std::max(mx, v);
  }
  if (!std::isfinite(mn)) mn = mx = 1;
  *lo = std::floor(std::log10(mn) - 0.15);
  *hi = std::ceil(std::log10(mx) + 0.15);
  while (*hi - *lo < min_decades) {
    *hi += 1;
    if (*hi - *lo < min_decades) *lo -= 1;
  }
  if (*hi - *lo > 12) *lo = *hi - 12;
}

std::string IntensityTick(int k) {
  if (k >= 0 && k <= 5) return absl::StrCat(static_cast<int64_t>(std::pow(10, k)));
  if (k < 0 && k >= -3) return absl::StrFormat("%.*f", -k, std::pow(10, k));
  return absl::StrCat("1e", k);
}

std::string RateTick(int k) {
  static const char* kPrefix[] = {"", "k", "M", "G", "T", "P", "E"};
  if (k < 0 || k > 20) return absl::StrCat("1e", k);
  return absl::StrCat(static_cast<int64_t>(std::pow(10, k % 3)), kPrefix[k / 3]);
}

std::string ClassColor(const std::string& c) {
  if (c == "gemm") return "#1f77b4";
  if (c == "attention") return "#d62728";
  if (c == "norm") return "#2ca02c";
  if (c == "elementwise") return "#ff7f0e";
  if (c == "sampling") return "#9467bd";
  return "#8c564b";
}

struct Box {
  double x0, y0, x1, y1;
  bool Overlaps(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
};

// A label position near (x, y) inside `page` that overlaps none of `taken` (else the first
// candidate, moved inside `page`).
Box PlaceLabel(double x, double y, double w, const Box& page, std::vector<Box>* taken) {
  const double h = 13;
  const double cand[][2] = {{9, -8},      {9, 14},      {-w / 2, 24}, {-w / 2, -14},
                            {-9 - w, -8}, {-9 - w, 14}, {9, 28},      {9, -22}};
  Box pick{x + cand[0][0], y + cand[0][1] - h + 3, x + cand[0][0] + w, y + cand[0][1] + 3};
  const double dx = std::max(page.x0 - pick.x0, std::min(0.0, page.x1 - pick.x1));
  const double dy = std::max(page.y0 - pick.y0, std::min(0.0, page.y1 - pick.y1));
  pick = {pick.x0 + dx, pick.y0 + dy, pick.x1 + dx, pick.y1 + dy};
  for (const auto& c : cand) {
    Box b{x + c[0], y + c[1] - h + 3, x + c[0] + w, y + c[1] + 3};
    const bool inside = b.x0 >= page.x0 && b.x1 <= page.x1 && b.y0 >= page.y0 && b.y1 <= page.y1;
    if (inside &&
        std::none_of(taken->begin(), taken->end(), [&b](const Box& t) { return t.Overlaps(b); })) {
      pick = b;
      break;
    }
  }
  taken->push_back(pick);
  return pick;
}

// The title's lines and font size: one line at (almost) full size when it fits; else the head
// (device and backend) and the tail (verdict) on lines of their own, shrinking the font until
// they take two lines, down to kMinTitleSize (then as many lines as they need).
std::vector<std::string> FitTitle(const std::string& head, const std::string& tail, double width,
                                  double* font_size) {
  const std::string full = absl::StrCat(head, " | ", tail);
  for (double size = kTitleSize; size >= kTitleSize - 2; size -= 1) {
    if (EstimateTextWidth(full, size, true) <= width) {
      *font_size = size;
      return {full};
    }
  }
  for (double size = kTitleSize;; size -= 1) {
    std::vector<std::string> lines = WrapText(head, size, true, width);
    for (std::string& l : WrapText(tail, size, true, width)) lines.push_back(std::move(l));
    if (lines.size() <= 2 || size <= kMinTitleSize) {
      *font_size = size;
      return lines;
    }
  }
}

std::string Text(double x, double y, const std::string& s, const std::string& attrs = "") {
  return absl::StrCat("<text x=\"", P(x), "\" y=\"", P(y), "\"", attrs.empty() ? "" : " ", attrs,
                      ">", XmlEscape(s), "</text>\n");
}

// `lines` centred on x from baseline `y` on, `line_height` apart, each with `attrs`; returns
// the baseline of the last line.
double CenteredLines(const std::vector<std::string>& lines, double x, double y, double line_height,
                     const std::string& attrs, std::string* out) {
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) y += line_height;
    *out += Text(x, y, lines[i], attrs);
  }
  return y;
}

// The bytes of the UTF-8 character starting at text[i] (1 for ASCII or a stray byte).
size_t CharBytes(const std::string& text, size_t i) {
  const unsigned char c = static_cast<unsigned char>(text[i]);
  size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  size_t k = 1;
  while (k < n && i + k < text.size() && (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80) {
    ++k;
  }
  return k;
}

}  // namespace

double EstimateTextWidth(const std::string& text, double font_size, bool bold) {
  const int* widths = bold ? kHelveticaBold : kHelvetica;
  double units = 0;
  for (size_t i = 0; i < text.size(); i += CharBytes(text, i)) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 32 && c < 127) {
      units += widths[c - 32];
    } else if (c < 32) {
      units += widths[0];  // tab, newline: the writer turns them into spaces at most
    } else {
      units += 1000;
    }
  }
  return units / 1000 * font_size * 1.2;
}

std::vector<std::string> WrapText(const std::string& text, double font_size, bool bold,
                                  double max_width) {
  auto fits = [&](const std::string& s) {
    return EstimateTextWidth(s, font_size, bold) <= max_width;
  };
  std::vector<std::string> lines;
  std::string line;
  size_t i = 0;
  while (i < text.size()) {
    size_t end = text.find(' ', i);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(i, end - i);
    i = end + 1;
    if (word.empty()) {
      if (!line.empty()) line += ' ';  // a run of spaces stays inside its line
      continue;
    }
    const std::string joined = line.empty() ? word : absl::StrCat(line, " ", word);
    if (fits(joined)) {
      line = joined;
      continue;
    }
    if (!line.empty()) lines.push_back(line);
    line.clear();
    // A word wider than a line: as many characters as fit on each line.
    while (!fits(word)) {
      size_t cut = 0;
      while (cut < word.size()) {
        const size_t next = cut + CharBytes(word, cut);
        if (!fits(word.substr(0, next))) break;
        cut = next;
      }
      if (cut == 0) cut = CharBytes(word, 0);  // not even one character fits: one per line
      lines.push_back(word.substr(0, cut));
      word = word.substr(cut);
    }
    line = word;
  }
  if (!line.empty() || lines.empty()) lines.push_back(line);
  return lines;
}

std::string XmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters other than tab/newline are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string RooflineSvg(const v1::DiagnosticsReport& r, const RooflineOptions& opt) {
  const v1::Calibration& cal = r.calibration();
  const v1::Profile& prof = r.profile();
  const double peak = cal.gemm_flops_per_s(), bw = cal.bandwidth_bytes_per_s();
  const bool roof = Positive(peak) && Positive(bw);
  const double ridge =
      roof ? (Positive(cal.ridge_flops_per_byte()) ? cal.ridge_flops_per_byte() : peak / bw) : 0;

  std::vector<double> xs, ys;
  if (roof) {
    xs = {ridge / 10, ridge * 10};
    ys = {peak * 1.5};
  }
  auto add = [&xs, &ys](double x, double y) {
    if (Positive(x) && Positive(y)) {
      xs.push_back(x);
      ys.push_back(y);
    }
  };
  for (const v1::OpClassProfile& c : r.classes()) add(c.intensity(), c.flops_per_s());
  for (const v1::StepPoint& s : r.step_points()) add(s.intensity(), s.flops_per_s());
  add(prof.intensity(), prof.flops_per_s());
  Axis ax, ay;
  Decades(xs, 3, &ax.lo, &ax.hi);
  Decades(ys, 3, &ay.lo, &ay.hi);
  const double w = opt.width, h = opt.height;

  const std::string device = !cal.device().empty() ? cal.device() : opt.device_fallback;
  const std::string title_head = absl::StrCat(
      "Saturn roofline: ", device.empty() ? "unknown device" : device,
      cal.backend().empty() ? "" : absl::StrCat(" (", cal.backend(), ", ", cal.dtype(), ")"));
  const std::string title_tail = absl::StrCat("verdict ", BottleneckName(r.bottleneck()));
  const std::string title = absl::StrCat(title_head, " | ", title_tail);
  std::string sub = absl::StrFormat("window %.2f s, %d steps; steps are %s; ", prof.window_s(),
                                    prof.steps(), BottleneckName(r.step_bound()));
  absl::StrAppend(&sub, roof ? absl::StrFormat("peak %s, bandwidth %s, ridge %.2f FLOP/B",
                                               FormatSi(peak, "FLOP/s"), FormatSi(bw, "B/s"), ridge)
                             : "not calibrated: no roof drawn");

  std::string s;
  absl::StrAppend(&s, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", opt.width, "\" height=\"",
                  opt.height, "\" viewBox=\"0 0 ", opt.width, " ", opt.height,
                  "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n");
  absl::StrAppend(&s, "<title>", XmlEscape(title), "</title>\n<desc>", XmlEscape(sub),
                  "</desc>\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n");
  // Title and subtitle, wrapped to the page; the plot starts below their last line.
  const double text_width = w - 2 * kTextMargin;
  double title_size = kTitleSize;
  const std::vector<std::string> title_lines =
      FitTitle(title_head, title_tail, text_width, &title_size);
  double y = CenteredLines(
      title_lines, w / 2, 26 - (kTitleSize - title_size) / 2, title_size * 1.25,
      absl::StrFormat(
          "class=\"title\" text-anchor=\"middle\" font-size=\"%g\" font-weight=\"bold\"",
          title_size),
      &s);
  y = CenteredLines(WrapText(sub, 12, false, text_width), w / 2, y + 20, 15,
                    "class=\"subtitle\" text-anchor=\"middle\" fill=\"#444444\"", &s);
  ax.p0 = kLeft;
  ax.p1 = w - kRight;
  ay.p0 = h - kBottom;
  // (A device name of several hundred characters still leaves a plot 120 px high.)
  ay.p1 = std::min(kTop + std::max(0.0, y - 46), ay.p0 - 120);

  // Grid, ticks and the plot frame.
  s += "<g id=\"grid\" stroke=\"#e3e3e3\" stroke-width=\"1\">\n";
  for (int k = static_cast<int>(ax.lo); k <= static_cast<int>(ax.hi); ++k) {
    const double x = ax.Map(std::pow(10, k));
    absl::StrAppend(&s, "<line x1=\"", P(x), "\" y1=\"", P(ay.p1), "\" x2=\"", P(x), "\" y2=\"",
                    P(ay.p0), "\"/>\n");
  }
  for (int k = static_cast<int>(ay.lo); k <= static_cast<int>(ay.hi); ++k) {
    const double y = ay.Map(std::pow(10, k));
    absl::StrAppend(&s, "<line x1=\"", P(ax.p0), "\" y1=\"", P(y), "\" x2=\"", P(ax.p1), "\" y2=\"",
                    P(y), "\"/>\n");
  }
  s += "</g>\n<g id=\"ticks\" fill=\"#333333\">\n";
  for (int k = static_cast<int>(ax.lo); k <= static_cast<int>(ax.hi); ++k) {
    s += Text(ax.Map(std::pow(10, k)), ay.p0 + 18, IntensityTick(k), "text-anchor=\"middle\"");
  }
  for (int k = static_cast<int>(ay.lo); k <= static_cast<int>(ay.hi); ++k) {
    s += Text(ax.p0 - 8, ay.Map(std::pow(10, k)) + 4, RateTick(k), "text-anchor=\"end\"");
  }
  s += "</g>\n";
  absl::StrAppend(&s, "<rect x=\"", P(ax.p0), "\" y=\"", P(ay.p1), "\" width=\"", P(ax.p1 - ax.p0),
                  "\" height=\"", P(ay.p0 - ay.p1), "\" fill=\"none\" stroke=\"#555555\"/>\n");
  s += Text((ax.p0 + ax.p1) / 2, h - 22, "arithmetic intensity (FLOP/byte, log scale)",
            "text-anchor=\"middle\"");
  const double ymid = (ay.p0 + ay.p1) / 2;
  s += Text(24, ymid, "FLOP/s (log scale)",
            absl::StrCat("text-anchor=\"middle\" transform=\"rotate(-90 24 ", P(ymid), ")\""));

  std::vector<Box> taken;
  const Box page{2, 2, w - 2, h - 2};
  if (roof) {
    // The slope starts where it enters the plot (bottom edge or left edge).
    const double x_start = std::max(std::pow(10, ax.lo), std::pow(10, ay.lo) / bw);
    const double x_end = std::pow(10, ax.hi);
    std::vector<std::string> pts;
    if (x_start < ridge)
      pts.push_back(absl::StrCat(P(ax.Map(x_start)), ",", P(ay.Map(bw * x_start))));
    pts.push_back(absl::StrCat(P(ax.Map(ridge)), ",", P(ay.Map(peak))));
    pts.push_back(absl::StrCat(P(ax.Map(x_end)), ",", P(ay.Map(peak))));
    absl::StrAppend(&s, "<g id=\"roof\">\n<polyline id=\"roofline\" points=\"",
                    absl::StrJoin(pts, " "),
                    "\" fill=\"none\" stroke=\"#222222\" stroke-width=\"2.5\"/>\n");
    const double rx = ax.Map(ridge), ry = ay.Map(peak);
    absl::StrAppend(&s, "<line id=\"ridge\" x1=\"", P(rx), "\" y1=\"", P(ry), "\" x2=\"", P(rx),
                    "\" y2=\"", P(ay.p0),
                    "\" stroke=\"#222222\" stroke-dasharray=\"5,4\" stroke-width=\"1.2\"/>\n");
    absl::StrAppend(&s, "<circle cx=\"", P(rx), "\" cy=\"", P(ry),
                    "\" r=\"4.5\" fill=\"#ffffff\" stroke=\"#222222\" stroke-width=\"2\"/>\n");
    const std::string ridge_label = absl::StrFormat("ridge %.2f FLOP/B", ridge);
    s += Text(rx + 8, ry + 16, ridge_label, "font-weight=\"bold\"");
    taken.push_back({rx + 8, ry + 4, rx + 8 + EstimateTextWidth(ridge_label, 12, true), ry + 19});
    s += Text(
        ax.p1 - 6, ry - 7,
        absl::StrCat("compute ceiling ", FormatSi(peak, "FLOP/s"), " (GEMM, ", cal.dtype(), ")"),
        "text-anchor=\"end\"");
    if (x_start < ridge) {
      const double x0 = ax.Map(x_start), y0 = ay.Map(bw * x_start);
      const double mx = (x0 + rx) / 2, my = (y0 + ry) / 2;
      const double angle = std::atan2(ry - y0, rx - x0) * 180 / M_PI;
      s += Text(mx, my - 7, absl::StrCat("memory bandwidth ", FormatSi(bw, "B/s")),
                absl::StrFormat("text-anchor=\"middle\" transform=\"rotate(%.1f %s %s)\"", angle,
                                P(mx), P(my)));
    }
    s += "</g>\n";
  }

  s += "<g id=\"steps\" fill=\"#7f7f7f\" fill-opacity=\"0.45\">\n";
  int placed_steps = 0;
  for (const v1::StepPoint& p : r.step_points()) {
    if (!Positive(p.intensity()) || !Positive(p.flops_per_s())) continue;
    ++placed_steps;
    absl::StrAppend(
        &s, "<circle class=\"step\" cx=\"", P(ax.Map(p.intensity())), "\" cy=\"",
        P(ay.Map(p.flops_per_s())), "\" r=\"2\"><title>",
        XmlEscape(absl::StrFormat("step %d: %d seqs, %d prefill + %d decode tokens", p.step_id(),
                                  p.num_seqs(), p.prefill_tokens(), p.decode_tokens())),
        "</title></circle>\n");
  }
  s += "</g>\n<g id=\"op-classes\">\n";
  // Labels keep clear of every marker, not only of each other.
  for (const v1::OpClassProfile& c : r.classes()) {
    if (!Positive(c.intensity()) || !Positive(c.flops_per_s())) continue;
    const double x = ax.Map(c.intensity()), y = ay.Map(c.flops_per_s());
    taken.push_back({x - 7, y - 7, x + 7, y + 7});
  }
  if (Positive(prof.intensity()) && Positive(prof.flops_per_s())) {
    const double x = ax.Map(prof.intensity()), y = ay.Map(prof.flops_per_s());
    taken.push_back({x - 9, y - 9, x + 9, y + 9});
  }
  std::vector<std::string> unplaced;
  for (const v1::OpClassProfile& c : r.classes()) {
    if (!Positive(c.intensity()) || !Positive(c.flops_per_s())) {
      unplaced.push_back(c.op_class());
      continue;
    }
    const double x = ax.Map(c.intensity()), y = ay.Map(c.flops_per_s());
    const std::string label = absl::StrFormat("%s %.0f%%", c.op_class(), 100 * c.time_share());
    absl::StrAppend(
        &s, "<circle class=\"op-class\" cx=\"", P(x), "\" cy=\"", P(y), "\" r=\"6\" fill=\"",
        ClassColor(c.op_class()), "\" stroke=\"#000000\" stroke-width=\"0.8\"><title>",
        XmlEscape(absl::StrFormat("%s: %.2f FLOP/B, %s, MFU %.2f%%, MBU %.2f%%", c.op_class(),
                                  c.intensity(), FormatSi(c.flops_per_s(), "FLOP/s"), 100 * c.mfu(),
                                  100 * c.mbu())),
        "</title></circle>\n");
    const Box b = PlaceLabel(x, y, EstimateTextWidth(label, 12, false), page, &taken);
    s += Text(b.x0, b.y1 - 3, label, absl::StrCat("fill=\"", ClassColor(c.op_class()), "\""));
  }
  if (Positive(prof.intensity()) && Positive(prof.flops_per_s())) {
    const double x = ax.Map(prof.intensity()), y = ay.Map(prof.flops_per_s());
    absl::StrAppend(&s, "<path id=\"window-point\" d=\"M ", P(x), " ", P(y - 8), " L ", P(x + 8),
                    " ", P(y), " L ", P(x), " ", P(y + 8), " L ", P(x - 8), " ", P(y),
                    " Z\" fill=\"#ffd700\" stroke=\"#000000\" stroke-width=\"1\"/>\n");
    const Box b = PlaceLabel(x, y, EstimateTextWidth("whole window", 12, true), page, &taken);
    s += Text(b.x0, b.y1 - 3, "whole window", "font-weight=\"bold\"");
  }
  s += "</g>\n";

  // Legend, top-left inside the plot, as wide as its longest line.
  const double lx = ax.p0 + 12, ly = ay.p1 + 16;
  std::vector<std::string> legend = {absl::StrFormat("one step (%d shown)", placed_steps),
                                     "op class (label: share of op time)",
                                     "whole window (all ops over its span, idle included)",
                                     "roof = min(peak, bandwidth x intensity)"};
  if (!unplaced.empty()) {
    legend.push_back(absl::StrCat("not placed (no FLOPs): ", absl::StrJoin(unplaced, ", ")));
  }
  double legend_w = 320;
  for (const std::string& l : legend)
    legend_w = std::max(legend_w, 30 + EstimateTextWidth(l, 12, false));
  s += "<g id=\"legend\">\n";
  absl::StrAppend(&s, "<rect x=\"", P(lx - 6), "\" y=\"", P(ly - 12), "\" width=\"", P(legend_w),
                  "\" height=\"", unplaced.empty() ? 70 : 86,
                  "\" fill=\"#ffffff\" fill-opacity=\"0.85\" stroke=\"#bbbbbb\"/>\n");
  absl::StrAppend(&s, "<circle cx=\"", P(lx + 4), "\" cy=\"", P(ly - 4),
                  "\" r=\"2\" fill=\"#7f7f7f\"/>\n");
  s += Text(lx + 16, ly, legend[0]);
  absl::StrAppend(&s, "<circle cx=\"", P(lx + 4), "\" cy=\"", P(ly + 12),
                  "\" r=\"5\" fill=\"#1f77b4\" stroke=\"#000000\" stroke-width=\"0.8\"/>\n");
  s += Text(lx + 16, ly + 16, legend[1]);
  absl::StrAppend(&s, "<path d=\"M ", P(lx + 4), " ", P(ly + 22), " l 6 6 l -6 6 l -6 -6 Z\" ",
                  "fill=\"#ffd700\" stroke=\"#000000\"/>\n");
  s += Text(lx + 16, ly + 32, legend[2]);
  s += Text(lx + 16, ly + 48, legend[3], "fill=\"#444444\"");
  if (!unplaced.empty()) s += Text(lx + 16, ly + 64, legend[4], "fill=\"#444444\"");
  s += "</g>\n</svg>\n";
  return s;
}

}  // namespace saturn::clients
