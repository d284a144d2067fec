// The charts of eacgm's HTML pages (eacgm report, eacgm compare -o), drawn as inline SVG by eacgm
// itself: the page must open anywhere, offline, years later, so nothing is fetched at view time
// and no charting library is needed. Every chart is a <figure> with a title and an HTML legend;
// series and markers carry `data-series` / `data-marker` attributes that the page's script (and
// the browser test) uses, and a <title> child that the browser shows on hover.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace eacgm::report {

// Text made safe inside HTML elements and attribute values.
std::string html_escape(std::string_view text);

// A value as people read it, for ticks and tooltips ("3.5 us", "12 MiB", "40 %").
using Formatter = std::function<std::string(double)>;
Formatter unit_formatter(std::string_view unit);  // format_value's units

struct Series {
  std::string name;
  std::vector<double> x, y;  // of one length; a NaN y breaks the line
};

// A vertical line across a time chart: an anomaly, with its text on hover.
struct Marker {
  double x = 0;
  std::string label;
};

struct LineChart {
  std::string title;
  std::string x_label = "seconds since the session began";
  std::string y_label;
  Formatter y_format;  // unset: plain numbers
  std::vector<Series> series;
  std::vector<Marker> markers;
  bool steps = false;  // a level held until the next point (device memory), not a slope
  bool log_y = false;  // for latencies that span orders of magnitude
  // The x range, shared by the charts of one page so that an anomaly sits at one place in all.
  double x_min = 0, x_max = 0;  // x_max <= x_min: the data's own range
};
std::string line_chart(const LineChart& chart);

// Rows (ranks) by columns (collectives, in order), each cell's value a colour; NaN cells are
// left blank. Columns are equal slices of [x_first, x_last] on the axis.
struct Heatmap {
  std::string title;
  std::vector<std::string> rows;
  std::vector<std::vector<double>> values;  // [row][column]
  std::string x_label;
  double x_first = 0, x_last = 0;
  std::string value_label;
  Formatter value_format;
};
std::string heatmap(const Heatmap& map);

// Value distributions side by side on one axis (the base runs' windows against the candidate
// runs'): a box from the first to the third quartile, the median, whiskers to the extremes, and
// every value as a dot.
struct Distribution {
  std::string name;
  std::vector<double> values;
};
std::string distributions(const std::string& title, const std::vector<Distribution>& groups,
                          const Formatter& format, bool log_x = false);

// Round tick values covering [lo, hi] (about `count` of them), for linear axes.
std::vector<double> nice_ticks(double lo, double hi, int count);

}  // namespace eacgm::report
