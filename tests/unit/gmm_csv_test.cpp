// Numeric CSV input: what is accepted (header or not, CRLF, blank lines, spaces, every number
// syntax from_chars reads, parsed to the same bits) and what is refused, always with the line.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "analysis/numeric_csv.h"

namespace eacgm {
namespace {

std::string error_of(std::string_view text) {
  Result<NumericTable> t = parse_numeric_csv(text, "x.csv");
  return t.ok() ? std::string("(accepted)") : t.error().message;
}

TEST(NumericCsv, HeaderIsDetected) {
  Result<NumericTable> t = parse_numeric_csv("a, \"b c\" ,d\n1,2,3\n4,5,6\n", "x.csv");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->column_names, (std::vector<std::string>{"a", "b c", "d"}));
  EXPECT_EQ(t->header_line, 1u);
  EXPECT_EQ(t->first_data_line, 2u);
  ASSERT_EQ(t->values.rows(), 2);
  ASSERT_EQ(t->values.cols(), 3);
  EXPECT_EQ(t->values(1, 2), 6);
}

TEST(NumericCsv, NoHeader) {
  Result<NumericTable> t = parse_numeric_csv("1,2\n3,4", "x.csv");  // no final newline
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->column_names.empty());
  EXPECT_EQ(t->header_line, 0u);
  EXPECT_EQ(t->first_data_line, 1u);
  EXPECT_EQ(t->values.rows(), 2);
  EXPECT_EQ(t->values(1, 0), 3);
}

TEST(NumericCsv, LenientWhereItIsHarmless) {
  Result<NumericTable> t =
      parse_numeric_csv("\r\n  \nx,y\r\n\r\n 1.5 ,\t-2e3\r\n+3,.25\r\n\n-0,1E-2\n   \n", "x.csv");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->header_line, 3u);
  EXPECT_EQ(t->first_data_line, 5u);
  ASSERT_EQ(t->values.rows(), 3);
  EXPECT_EQ(t->values(0, 0), 1.5);
  EXPECT_EQ(t->values(0, 1), -2000);
  EXPECT_EQ(t->values(1, 0), 3);
  EXPECT_EQ(t->values(1, 1), 0.25);
  EXPECT_TRUE(std::signbit(t->values(2, 0)));
  EXPECT_EQ(t->values(2, 1), 0.01);
}

TEST(NumericCsv, ErrorsNameTheLine) {
  EXPECT_EQ(error_of("a,b\n1,2\n3\n"), "x.csv:3: expected 2 fields, found 1");
  EXPECT_EQ(error_of("1,2\n3,4,5\n"), "x.csv:2: expected 2 fields, found 3");
  EXPECT_EQ(error_of("1,2\n\n\n3,abc\n"), "x.csv:4: field 2 is not a number: 'abc'");
  EXPECT_EQ(error_of("1,2\n3,4x\n"), "x.csv:2: field 2 is not a number: '4x'");
  EXPECT_EQ(error_of("a\n1\nnan\n"), "x.csv:3: field 1 is not a finite number: 'nan'");
  EXPECT_EQ(error_of("1,-inf\n"), "x.csv:1: field 2 is not a finite number: '-inf'");
  EXPECT_EQ(error_of("1,2\n1,\n"), "x.csv:2: field 2 is empty");
  EXPECT_EQ(error_of("1,2\n1,+-2\n"), "x.csv:2: field 2 is not a number: '+-2'");
  EXPECT_EQ(error_of("1e999\n"), "x.csv:1: field 1 is out of the range of a double: '1e999'");
  EXPECT_EQ(error_of(""), "x.csv: empty file (no data rows)");
  EXPECT_EQ(error_of("\n \r\n"), "x.csv: empty file (no data rows)");
  EXPECT_EQ(error_of("a,b\n\n"), "x.csv: no data rows after the header on line 1");
  EXPECT_NE(error_of("a,2\n1,2\n").find("x.csv:1: first row mixes numbers and text"),
            std::string::npos);
  EXPECT_EQ(error_of("a,,b\n1,2,3\n"), "x.csv:1: header has an empty column name (field 2)");
}

// The fast number path must give the very bits from_chars gives, for every way numbers are
// commonly written.
TEST(NumericCsv, ParsesNumbersExactly) {
  std::mt19937_64 rng(42);
  const char* formats[] = {"%.17g", "%.10g", "%.3f", "%.6e", "%g", "%.20f", "%.0f", "%.19g"};
  std::string text;
  std::vector<double> expected;
  char buf[64];
  for (int i = 0; i < 20000; ++i) {
    double v = std::ldexp(static_cast<double>(rng() >> 11) * 0x1.0p-53,
                          static_cast<int>(rng() % 120) - 60);
    if (rng() & 1) v = -v;
    std::snprintf(buf, sizeof buf, formats[i % 8], v);
    text += buf;
    text += i % 2 ? "\n" : ",";
    double e = 0;
    std::from_chars(buf, buf + std::strlen(buf), e);
    expected.push_back(e);
  }
  Result<NumericTable> t = parse_numeric_csv(text, "x.csv");
  ASSERT_TRUE(t.ok()) << t.error().message;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(t->values(static_cast<Eigen::Index>(i / 2), static_cast<Eigen::Index>(i % 2)),
              expected[i])
        << i;
  }
}

// Inputs over a mebibyte are parsed in parallel chunks: rows keep their order and errors keep
// their line numbers.
TEST(NumericCsv, LargeInputsInChunks) {
  std::string text = "t,v\n";
  const int rows = 120000;
  for (int i = 0; i < rows; ++i) text += std::to_string(i) + "," + std::to_string(i * 0.5) + "\n";
  ASSERT_GT(text.size(), std::size_t{1} << 21);
  Result<NumericTable> t = parse_numeric_csv(text, "big.csv");
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->values.rows(), rows);
  for (int i = 0; i < rows; i += 997) {
    ASSERT_EQ(t->values(i, 0), i);
    ASSERT_EQ(t->values(i, 1), i * 0.5);
  }
  // Break a row near the end (in the last chunk).
  const std::string needle = "\n" + std::to_string(rows - 10) + ",";
  const std::size_t at = text.find(needle);
  ASSERT_NE(at, std::string::npos);
  text.replace(at + needle.size(), 1, "?");
  const std::string message = parse_numeric_csv(text, "big.csv").error().message;
  EXPECT_EQ(message.rfind(fmt::format("big.csv:{}: field 2 is not a number: '?", rows - 10 + 2), 0),
            0u)
      << message;
}

TEST(NumericCsv, Files) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("eacgm_csv_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "data.csv").string();
  std::ofstream(file) << "a,b\n1,2\n";
  Result<NumericTable> t = read_numeric_csv(file);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->values(0, 1), 2);
  EXPECT_EQ(read_numeric_csv((dir / "nope.csv").string())
                .error()
                .message.find((dir / "nope.csv").string() + ": cannot open"),
            0u);
  EXPECT_NE(read_numeric_csv(dir.string()).error().message.find("is a directory"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace eacgm
