// One self-contained HTML page: its style and script inline, every chart inline SVG
// (svg_chart.h), so that the file alone is the report: mailed, attached to a ticket, opened
// offline. The script only adds: a table of contents, legends that hide and show a series, tables
// sorted by a click on a column. It counts its own errors on the <html> element
// (data-script-errors) and marks the page data-ready="yes" when it ran to its end, which is what
// the browser test reads.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace eacgm::report {

struct Cell {
  std::string text;
  std::optional<double> value;  // a number sorts by this; text cells sort alphabetically
};
inline Cell text_cell(std::string text) { return {std::move(text), std::nullopt}; }
inline Cell number_cell(std::string text, double value) { return {std::move(text), value}; }

struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<Cell>> rows;
  // One bar per row behind its first cell, as a share of the widest (time spent, calls): empty
  // for none.
  std::vector<double> bars;
  std::string css_class;  // for the browser test to find it: "apis", "anomalies", ...
};
std::string table_html(const Table& table);

class HtmlPage {
 public:
  explicit HtmlPage(std::string title) : title_(std::move(title)) {}

  // Lines under the title: what was recorded, how it ended (already HTML).
  void add_fact(std::string_view name, std::string html);
  // A section with its own heading; `id` names it in the table of contents and for the test.
  void add_section(std::string id, std::string heading, std::string html);

  std::string render() const;

 private:
  struct Section {
    std::string id, heading, html;
  };
  std::string title_;
  std::vector<std::pair<std::string, std::string>> facts_;
  std::vector<Section> sections_;
};

}  // namespace eacgm::report
