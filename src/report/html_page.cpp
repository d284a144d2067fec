#include "report/html_page.h"

#include <fmt/format.h>

#include <algorithm>

#include "report/svg_chart.h"

namespace eacgm::report {
namespace {

constexpr std::string_view kStyle = R"css(
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222;
       margin: 0; background: #fafafa; }
header, main { max-width: 960px; margin: 0 auto; padding: 0 16px; }
header { padding-top: 18px; }
h1 { font-size: 22px; margin: 0 0 8px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0; }
dl.facts dt { color: #666; }
dl.facts dd { margin: 0; word-break: break-word; }
nav#toc { margin: 12px 0 0; display: flex; flex-wrap: wrap; gap: 4px 14px; }
nav#toc a { color: #0b57d0; text-decoration: none; }
figure.chart { margin: 10px 0 18px; background: #fff; border: 1px solid #e3e3e3;
               border-radius: 6px; padding: 8px 10px; }
figure.chart figcaption { font-weight: 600; margin-bottom: 4px; }
figure.chart svg { width: 100%; height: auto; display: block; font-size: 11px; }
svg text { fill: #444; }
svg text.label { fill: #666; }
svg .grid { stroke: #eee; }
svg .tick, svg .axis { stroke: #999; }
svg .series path { stroke-width: 1.6; }
svg .series circle { stroke: none; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 8px; margin-top: 4px; }
.legend button { font: inherit; font-size: 12px; border: 1px solid #ddd; background: #fff;
                 border-radius: 4px; padding: 1px 6px; cursor: pointer; }
.legend button.off { opacity: 0.35; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px;
          margin-right: 5px; vertical-align: -1px; }
.marker-key { font-size: 12px; padding: 1px 6px; }
table { border-collapse: collapse; width: 100%; background: #fff; margin: 6px 0 16px;
        font-size: 13px; }
th, td { border-bottom: 1px solid #eee; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; cursor: pointer; user-select: none; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.bar { position: relative; }
td.bar > span.fill { position: absolute; left: 0; top: 2px; bottom: 2px; background: #dbe9f6;
                     z-index: 0; }
td.bar > span.text { position: relative; z-index: 1; word-break: break-all; }
p.note { color: #555; }
.verdict-regression { color: #b00020; font-weight: 600; }
.verdict-improvement { color: #1b7f3b; font-weight: 600; }
)css";

// Runs first: every later error is counted, so the test can tell a page whose script failed.
constexpr std::string_view kErrorCounter = R"js(
document.documentElement.dataset.scriptErrors = "0";
window.addEventListener("error", function () {
  var root = document.documentElement;
  root.dataset.scriptErrors = String(Number(root.dataset.scriptErrors) + 1);
});
)js";

constexpr std::string_view kScript = R"js(
(function () {
  var toc = document.getElementById("toc");
  document.querySelectorAll("main > section[id]").forEach(function (section) {
    var link = document.createElement("a");
    link.href = "#" + section.id;
    link.textContent = section.querySelector("h2").textContent;
    toc.appendChild(link);
  });
  document.querySelectorAll("figure.chart .legend button[data-series]").forEach(function (b) {
    b.addEventListener("click", function () {
      var hidden = b.classList.toggle("off");
      b.closest("figure").querySelectorAll('svg [data-series="' + b.dataset.series + '"]')
        .forEach(function (g) { g.style.display = hidden ? "none" : ""; });
    });
  });
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("th").forEach(function (th, column) {
      th.addEventListener("click", function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var down = th.dataset.order !== "down";
        table.querySelectorAll("th").forEach(function (h) { delete h.dataset.order; });
        th.dataset.order = down ? "down" : "up";
        var key = function (row) {
          var cell = row.cells[column];
          return cell.dataset.value !== undefined ? Number(cell.dataset.value) : cell.textContent;
        };
        rows.sort(function (a, b) {
          var x = key(a), y = key(b);
          var order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
          return down ? -order : order;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
  document.documentElement.dataset.ready = "yes";
})();
)js";

}  // namespace

std::string table_html(const Table& table) {
  std::string out = fmt::format("<table class=\"sortable {}\"><thead><tr>", table.css_class);
  for (const std::string& c : table.columns) out += fmt::format("<th>{}</th>", html_escape(c));
  out += "</tr></thead><tbody>";
  double widest = 0;
  for (double b : table.bars) widest = std::max(widest, b);
  for (size_t r = 0; r < table.rows.size(); ++r) {
    out += "<tr>";
    for (size_t c = 0; c < table.rows[r].size(); ++c) {
      const Cell& cell = table.rows[r][c];
      const std::string value =
          cell.value ? fmt::format(" data-value=\"{:.9g}\"", *cell.value) : std::string();
      if (c == 0 && r < table.bars.size() && widest > 0) {
        out += fmt::format(
            "<td class=\"bar\"{}><span class=\"fill\" style=\"width:{:.1f}%\"></span><span "
            "class=\"text\">{}</span></td>",
            value, 100 * table.bars[r] / widest, html_escape(cell.text));
      } else {
        out += fmt::format("<td{}{}>{}</td>", cell.value ? " class=\"num\"" : "", value,
                           html_escape(cell.text));
      }
    }
    out += "</tr>";
  }
  return out + "</tbody></table>\n";
}

void HtmlPage::add_fact(std::string_view name, std::string html) {
  facts_.emplace_back(std::string(name), std::move(html));
}

void HtmlPage::add_section(std::string id, std::string heading, std::string html) {
  sections_.push_back({std::move(id), std::move(heading), std::move(html)});
}

std::string HtmlPage::render() const {
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta "
      "name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{}</title>"
      "<script>{}</script><style>{}</style></head><body><header><h1>{}</h1><dl class=\"facts\">",
      html_escape(title_), kErrorCounter, kStyle, html_escape(title_));
  for (const auto& [name, html] : facts_) {
    out += fmt::format("<dt>{}</dt><dd>{}</dd>", html_escape(name), html);
  }
  out += "</dl><nav id=\"toc\"></nav></header><main>\n";
  for (const Section& s : sections_) {
    out += fmt::format("<section id=\"{}\"><h2>{}</h2>\n{}</section>\n", html_escape(s.id),
                       html_escape(s.heading), s.html);
  }
  out += fmt::format("</main><script>{}</script></body></html>\n", kScript);
  return out;
}

}  // namespace eacgm::report
