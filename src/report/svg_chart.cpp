#include "report/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "common/human_text.h"

namespace eacgm::report {
namespace {

// Distinct on white and for the common colour blindnesses (the Okabe-Ito set, then darker tones).
constexpr std::array<std::string_view, 10> kColours = {"#0072b2", "#e69f00", "#009e73", "#cc79a7",
                                                       "#56b4e9", "#d55e00", "#7f7f7f", "#000000",
                                                       "#8c564b", "#f0e442"};
constexpr std::string_view kMarkerColour = "#d62728";

std::string_view colour(size_t i) { return kColours[i % kColours.size()]; }

// Coordinates with two decimals: enough for a screen, and a page of many charts stays small.
std::string num(double v) { return fmt::format("{:.2f}", v); }

struct Range {
  double lo = 0, hi = 1;
};

// One axis: a range mapped onto pixels, linear or logarithmic.
struct Axis {
  Range range;
  double from_px = 0, to_px = 1;  // where range.lo and range.hi land
  bool log = false;

  double px(double v) const {
    double t;
    if (log) {
      const double lo = std::log10(range.lo), hi = std::log10(range.hi);
      t = (std::log10(std::max(v, range.lo)) - lo) / (hi - lo);
    } else {
      t = (v - range.lo) / (range.hi - range.lo);
    }
    return from_px + std::clamp(t, -0.05, 1.05) * (to_px - from_px);
  }

  std::vector<double> ticks(int count) const {
    if (!log) return nice_ticks(range.lo, range.hi, count);
    std::vector<double> out;
    const int first = static_cast<int>(std::floor(std::log10(range.lo)));
    const int last = static_cast<int>(std::ceil(std::log10(range.hi)));
    // Few decades: 1, 2 and 5 of each; many: the powers of ten alone.
    const bool fine = last - first <= 2;
    for (int e = first; e <= last; ++e) {
      for (double m : {1.0, 2.0, 5.0}) {
        if (!fine && m != 1.0) continue;
        const double v = m * std::pow(10.0, e);
        if (v >= range.lo * 0.999 && v <= range.hi * 1.001) out.push_back(v);
      }
    }
    return out;
  }
};

std::string plain_number(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e6 || a < 1e-3) return fmt::format("{:.3g}", v);
  if (a >= 100 || v == std::round(v)) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.3g}", v);
}

std::string format_with(const Formatter& f, double v) { return f ? f(v) : plain_number(v); }

void finite_range(const std::vector<double>& values, double& lo, double& hi, bool positive) {
  for (double v : values) {
    if (!std::isfinite(v) || (positive && v <= 0)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
}

// A figure's frame: the title above, the SVG, the legend below.
std::string figure(const std::string& title, const std::string& svg, const std::string& legend,
                   std::string_view kind) {
  return fmt::format(
      "<figure class=\"chart\" data-chart=\"{}\"><figcaption>{}</figcaption>{}{}</figure>\n", kind,
      html_escape(title), svg, legend);
}

std::string legend_html(const std::vector<Series>& series) {
  std::string out = "<div class=\"legend\">";
  for (size_t i = 0; i < series.size(); ++i) {
    out += fmt::format(
        "<button type=\"button\" data-series=\"{}\" title=\"show or hide\"><span "
        "class=\"swatch\" style=\"background:{}\"></span>{}</button>",
        i, colour(i), html_escape(series[i].name));
  }
  return out + "</div>";
}

// Left and bottom axes with grid lines, and the y axis label turned along the axis.
std::string axes(const Axis& x, const Axis& y, const Formatter& x_format, const Formatter& y_format,
                 const std::string& x_label, const std::string& y_label) {
  std::string out = "<g class=\"axes\">";
  for (double t : y.ticks(5)) {
    const double py = y.px(t);
    out += fmt::format(
        "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" class=\"grid\"/><text x=\"{}\" y=\"{}\" "
        "text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>",
        num(x.from_px), num(x.to_px), num(py), num(py), num(x.from_px - 6), num(py),
        html_escape(format_with(y_format, t)));
  }
  for (double t : x.ticks(8)) {
    const double px = x.px(t);
    out += fmt::format(
        "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" class=\"tick\"/><text x=\"{}\" y=\"{}\" "
        "text-anchor=\"middle\">{}</text>",
        num(px), num(px), num(y.from_px), num(y.from_px + 4), num(px), num(y.from_px + 16),
        html_escape(format_with(x_format, t)));
  }
  out += fmt::format(
      "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" class=\"axis\"/>"
      "<line x1=\"{0}\" x2=\"{0}\" y1=\"{2}\" y2=\"{3}\" class=\"axis\"/>",
      num(x.from_px), num(x.to_px), num(y.from_px), num(y.to_px));
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"label\">{}</text>",
                     num((x.from_px + x.to_px) / 2), num(y.from_px + 32), html_escape(x_label));
  if (!y_label.empty()) {
    out += fmt::format(
        "<text transform=\"translate(14 {}) rotate(-90)\" text-anchor=\"middle\" "
        "class=\"label\">{}</text>",
        num((y.from_px + y.to_px) / 2), html_escape(y_label));
  }
  return out + "</g>";
}

}  // namespace

std::string html_escape(std::string_view text) {
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
        out += "&#39;";
        break;
      default:
        // Control characters (a name read from a traced process's memory) would make the page
        // invalid XML inside SVG; they are shown as a replacement character.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') {
          out += "\xef\xbf\xbd";
        } else {
          out += c;
        }
    }
  }
  return out;
}

Formatter unit_formatter(std::string_view unit) {
  return [u = std::string(unit)](double v) { return format_value(v, u); };
}

std::vector<double> nice_ticks(double lo, double hi, int count) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi) || count < 1) return {lo};
  const double raw = (hi - lo) / count;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<double> out;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) {
    out.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  return out;
}

std::string line_chart(const LineChart& chart) {
  constexpr double kWidth = 900, kHeight = 230, kLeft = 78, kRight = 14, kTop = 10, kBottom = 40;
  Range xr{std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
  Range yr = xr;
  for (const Series& s : chart.series) {
    finite_range(s.x, xr.lo, xr.hi, false);
    finite_range(s.y, yr.lo, yr.hi, chart.log_y);
  }
  if (chart.x_max > chart.x_min) xr = {chart.x_min, chart.x_max};
  if (!(xr.hi > xr.lo))
    xr = {std::isfinite(xr.lo) ? xr.lo : 0, (std::isfinite(xr.lo) ? xr.lo : 0) + 1};
  if (!std::isfinite(yr.lo)) yr = {chart.log_y ? 1.0 : 0.0, chart.log_y ? 10.0 : 1.0};
  if (chart.log_y) {
    yr.lo = std::pow(10.0, std::floor(std::log10(yr.lo)));
    yr.hi = std::max(std::pow(10.0, std::ceil(std::log10(yr.hi))), yr.lo * 10);
  } else {
    yr.lo = std::min(yr.lo, 0.0);
    if (!(yr.hi > yr.lo)) yr.hi = yr.lo + 1;
    const std::vector<double> t = nice_ticks(yr.lo, yr.hi, 5);
    if (!t.empty() && t.back() < yr.hi)
      yr.hi += (t.size() > 1 ? t[1] - t[0] : 1);
    else if (!t.empty())
      yr.hi = t.back();
  }
  const Axis x{xr, kLeft, kWidth - kRight, false};
  const Axis y{yr, kHeight - kBottom, kTop, chart.log_y};

  std::string svg =
      fmt::format("<svg viewBox=\"0 0 {} {}\" role=\"img\" xmlns=\"http://www.w3.org/2000/svg\">",
                  kWidth, kHeight);
  svg += axes(x, y, Formatter{}, chart.y_format, chart.x_label, chart.y_label);
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    std::string d;
    std::string dots;
    bool pen_down = false;
    size_t points = 0;
    for (size_t k = 0; k < std::min(s.x.size(), s.y.size()); ++k) {
      const double v = s.y[k];
      if (!std::isfinite(v) || !std::isfinite(s.x[k]) || (chart.log_y && v <= 0)) {
        pen_down = false;
        continue;
      }
      const double px = x.px(s.x[k]), py = y.px(v);
      if (!pen_down) {
        d += fmt::format("M{} {}", num(px), num(py));
      } else if (chart.steps) {
        d += fmt::format("H{}V{}", num(px), num(py));
      } else {
        d += fmt::format("L{} {}", num(px), num(py));
      }
      pen_down = true;
      ++points;
      dots += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"2\"/>", num(px), num(py));
    }
    if (chart.steps && pen_down) d += fmt::format("H{}", num(x.to_px));
    svg += fmt::format(
        "<g class=\"series\" data-series=\"{}\" stroke=\"{}\" fill=\"{}\"><title>{}</title>"
        "<path d=\"{}\" fill=\"none\"/>{}</g>",
        i, colour(i), colour(i), html_escape(s.name), d, points <= 60 ? dots : "");
  }
  for (size_t i = 0; i < chart.markers.size(); ++i) {
    const double px = x.px(chart.markers[i].x);
    // A wide transparent line over the thin one, so that hovering finds it.
    svg += fmt::format(
        "<g class=\"marker\" data-marker=\"{}\"><title>{}</title><line x1=\"{}\" x2=\"{}\" "
        "y1=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-dasharray=\"4 3\"/><line x1=\"{}\" x2=\"{}\" "
        "y1=\"{}\" y2=\"{}\" stroke=\"transparent\" stroke-width=\"8\"/></g>",
        i, html_escape(chart.markers[i].label), num(px), num(px), num(y.from_px), num(y.to_px),
        kMarkerColour, num(px), num(px), num(y.from_px), num(y.to_px));
  }
  svg += "</svg>";
  std::string legend = legend_html(chart.series);
  if (!chart.markers.empty()) {
    legend.insert(legend.size() - 6,
                  fmt::format("<span class=\"marker-key\"><span class=\"swatch\" "
                              "style=\"background:{}\"></span>anomaly ({})</span>",
                              kMarkerColour, chart.markers.size()));
  }
  return figure(chart.title, svg, legend, "line");
}

std::string heatmap(const Heatmap& map) {
  constexpr double kWidth = 900, kLeft = 170, kRight = 14, kTop = 8, kBottom = 58;
  const size_t rows = map.rows.size();
  size_t columns = 0;
  double hi = 0;
  for (const auto& r : map.values) {
    columns = std::max(columns, r.size());
    for (double v : r) {
      if (std::isfinite(v)) hi = std::max(hi, v);
    }
  }
  // The scale tops out at the 99th percentile of the cells, not the largest: one collective that
  // waited on a page fault would otherwise wash every other cell out to white.
  {
    std::vector<double> cells;
    for (const auto& r : map.values) {
      for (double v : r) {
        if (std::isfinite(v)) cells.push_back(v);
      }
    }
    if (!cells.empty()) {
      const auto at = cells.begin() + static_cast<std::ptrdiff_t>((cells.size() - 1) * 99 / 100);
      std::nth_element(cells.begin(), at, cells.end());
      hi = *at;
    }
  }
  const bool clipped = std::any_of(map.values.begin(), map.values.end(), [&](const auto& r) {
    return std::any_of(r.begin(), r.end(), [&](double v) { return std::isfinite(v) && v > hi; });
  });
  if (hi <= 0) hi = 1;
  const double cell_h = std::clamp(260.0 / std::max<size_t>(rows, 1), 6.0, 24.0);
  const double plot_w = kWidth - kLeft - kRight;
  const double cell_w = plot_w / static_cast<double>(std::max<size_t>(columns, 1));
  const double height = kTop + cell_h * static_cast<double>(rows) + kBottom;
  // White through orange to dark red: later is darker.
  const auto shade = [&](double v) {
    const double t = std::clamp(v / hi, 0.0, 1.0);
    struct Rgb {
      double r, g, b;
    };
    constexpr Rgb stops[] = {{255, 247, 236}, {252, 141, 89}, {127, 0, 0}};
    const double s = t * 2;
    const size_t i = std::min<size_t>(static_cast<size_t>(s), 1);
    const double f = s - static_cast<double>(i);
    const Rgb& a = stops[i];
    const Rgb& b = stops[i + 1];
    return fmt::format("rgb({:.0f},{:.0f},{:.0f})", a.r + (b.r - a.r) * f, a.g + (b.g - a.g) * f,
                       a.b + (b.b - a.b) * f);
  };
  std::string svg =
      fmt::format("<svg viewBox=\"0 0 {} {}\" role=\"img\" xmlns=\"http://www.w3.org/2000/svg\">",
                  kWidth, num(height));
  const double span = map.x_last - map.x_first;
  for (size_t r = 0; r < rows; ++r) {
    const double py = kTop + cell_h * static_cast<double>(r);
    svg += fmt::format(
        "<g class=\"heat-row\" data-row=\"{}\"><text x=\"{}\" y=\"{}\" text-anchor=\"end\" "
        "dominant-baseline=\"middle\">{}</text>",
        r, num(kLeft - 6), num(py + cell_h / 2), html_escape(map.rows[r]));
    const std::vector<double>& values = map.values[r];
    for (size_t c = 0; c < values.size(); ++c) {
      if (!std::isfinite(values[c])) continue;
      const double from = map.x_first + span * static_cast<double>(c) / columns;
      const double to = map.x_first + span * static_cast<double>(c + 1) / columns;
      svg += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}, {} {:.0f} to "
          "{:.0f}: {}</title></rect>",
          num(kLeft + cell_w * static_cast<double>(c)), num(py), num(cell_w + 0.3), num(cell_h - 1),
          shade(values[c]), html_escape(map.rows[r]), html_escape(map.x_label), from, to,
          html_escape(format_with(map.value_format, values[c])));
    }
    svg += "</g>";
  }
  const double axis_y = kTop + cell_h * static_cast<double>(rows);
  const Axis x{{map.x_first, map.x_last > map.x_first ? map.x_last : map.x_first + 1},
               kLeft,
               kWidth - kRight,
               false};
  for (double t : x.ticks(8)) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", num(x.px(t)),
                       num(axis_y + 14), plain_number(t));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"label\">{}</text>",
                     num(kLeft + plot_w / 2), num(axis_y + 30), html_escape(map.x_label));
  // The colour scale.
  const double key_w = 200, key_x = kWidth - kRight - key_w - 90, key_y = axis_y + 38;
  svg += fmt::format(
      "<defs><linearGradient id=\"heat-scale\"><stop offset=\"0\" stop-color=\"{}\"/><stop "
      "offset=\"0.5\" stop-color=\"{}\"/><stop offset=\"1\" stop-color=\"{}\"/></linearGradient>"
      "</defs><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"8\" fill=\"url(#heat-scale)\"/>"
      "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" dominant-baseline=\"middle\">{} 0</text>"
      "<text x=\"{}\" y=\"{}\" dominant-baseline=\"middle\">{}</text>",
      shade(0), shade(hi / 2), shade(hi), num(key_x), num(key_y), num(key_w), num(key_x - 4),
      num(key_y + 4), html_escape(map.value_label), num(key_x + key_w + 4), num(key_y + 4),
      html_escape((clipped ? "≥ " : "") + format_with(map.value_format, hi)));
  svg += "</svg>";
  return figure(map.title, svg, "", "heatmap");
}

std::string distributions(const std::string& title, const std::vector<Distribution>& groups,
                          const Formatter& format, bool log_x) {
  constexpr double kWidth = 900, kLeft = 190, kRight = 20, kTop = 8, kRow = 44, kBottom = 40;
  Range r{std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
  for (const Distribution& g : groups) finite_range(g.values, r.lo, r.hi, log_x);
  if (!std::isfinite(r.lo)) r = {log_x ? 1.0 : 0.0, log_x ? 10.0 : 1.0};
  if (log_x) {
    r.lo = std::pow(10.0, std::floor(std::log10(r.lo)));
    r.hi = std::max(std::pow(10.0, std::ceil(std::log10(r.hi))), r.lo * 10);
  } else {
    const double pad = r.hi > r.lo ? (r.hi - r.lo) * 0.05 : std::max(std::fabs(r.lo) * 0.1, 1.0);
    r = {r.lo - pad, r.hi + pad};
  }
  const double height = kTop + kRow * static_cast<double>(groups.size()) + kBottom;
  const Axis x{r, kLeft, kWidth - kRight, log_x};
  const Axis y{{0, 1}, height - kBottom, kTop, false};
  std::string svg =
      fmt::format("<svg viewBox=\"0 0 {} {}\" role=\"img\" xmlns=\"http://www.w3.org/2000/svg\">",
                  kWidth, num(height));
  for (double t : x.ticks(6)) {
    const double px = x.px(t);
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\" class=\"grid\"/><text x=\"{0}\" "
        "y=\"{3}\" text-anchor=\"middle\">{4}</text>",
        num(px), num(kTop), num(y.from_px), num(y.from_px + 16),
        html_escape(format_with(format, t)));
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    std::vector<double> v;
    for (double value : groups[i].values) {
      if (std::isfinite(value) && (!log_x || value > 0)) v.push_back(value);
    }
    std::sort(v.begin(), v.end());
    const double mid = kTop + kRow * (static_cast<double>(i) + 0.5);
    svg += fmt::format(
        "<g class=\"distribution\" data-series=\"{}\" stroke=\"{}\" fill=\"{}\"><text x=\"{}\" "
        "y=\"{}\" text-anchor=\"end\" dominant-baseline=\"middle\" stroke=\"none\" "
        "fill=\"#222\">{}</text>",
        i, colour(i), colour(i), num(kLeft - 8), num(mid), html_escape(groups[i].name));
    if (!v.empty()) {
      const auto quantile = [&v](double q) {
        const double pos = q * static_cast<double>(v.size() - 1);
        const auto lo = static_cast<size_t>(std::floor(pos));
        const size_t hi = std::min(lo + 1, v.size() - 1);
        return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
      };
      const double q1 = quantile(0.25), q2 = quantile(0.5), q3 = quantile(0.75);
      svg += fmt::format(
          "<title>{}: {} values, median {}, quartiles {} to {}</title>"
          "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/>"
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill-opacity=\"0.15\"/>"
          "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke-width=\"3\"/>",
          html_escape(groups[i].name), v.size(), html_escape(format_with(format, q2)),
          html_escape(format_with(format, q1)), html_escape(format_with(format, q3)),
          num(x.px(v.front())), num(x.px(v.back())), num(mid), num(mid), num(x.px(q1)),
          num(mid - 12), num(std::max(x.px(q3) - x.px(q1), 1.0)), 24, num(x.px(q2)), num(x.px(q2)),
          num(mid - 14), num(mid + 14));
      // Every value as a dot, spread up and down by a fixed pattern so that equal values show.
      const size_t stride = std::max<size_t>(1, v.size() / 400);
      for (size_t k = 0; k < v.size(); k += stride) {
        const double jitter = static_cast<double>((k * 7919) % 17) - 8;
        svg += fmt::format(
            "<circle cx=\"{}\" cy=\"{}\" r=\"2\" fill-opacity=\"0.6\" "
            "stroke=\"none\"/>",
            num(x.px(v[k])), num(mid + jitter));
      }
    }
    svg += "</g>";
  }
  svg += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" class=\"axis\"/>",
                     num(kLeft), num(kWidth - kRight), num(y.from_px));
  svg += "</svg>";
  return figure(title, svg, "", "distributions");
}

}  // namespace eacgm::report
