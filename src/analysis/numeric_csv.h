// Numeric CSV tables for the analysis tools: comma-separated finite numbers, one sample per line,
// with an optional header row of column names. Parsing is strict, because a silently skipped or
// misread row would change a model: every error names the source and the line.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace eacgm {

struct NumericTable {
  // Column names from the header row; empty when the file has no header.
  std::vector<std::string> column_names;
  // One row per data line, one column per field, column-major (what the GMM code wants).
  Eigen::MatrixXd values;
  // 1-based line numbers of the header (0 when there is none) and of the first data row.
  std::size_t header_line = 0;
  std::size_t first_data_line = 0;
};

// Parses `text`; `source` (a file name) prefixes error messages: "X.csv:17: ...".
//
// Rules: fields are separated by ','; spaces and tabs around a field are ignored, as are blank
// lines and a trailing '\r' (CRLF files). The first non-blank line is a header when none of its
// fields is a number, data when all are, and an error when it mixes both. Every data row must have
// as many fields as the first row, and every field must be a finite number (std::from_chars
// syntax plus an optional leading '+'). An input with no data row is an error.
Result<NumericTable> parse_numeric_csv(std::string_view text, std::string_view source);

// Reads the whole file and parses it; errors name `path`.
Result<NumericTable> read_numeric_csv(const std::string& path);

}  // namespace eacgm
