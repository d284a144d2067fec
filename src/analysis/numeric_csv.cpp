#include "analysis/numeric_csv.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "analysis/parallel.h"

namespace eacgm {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && (is_blank(s.back()) || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Shortened for messages, so that a binary file does not flood the terminal.
std::string quoted(std::string_view field) {
  constexpr std::size_t kMax = 40;
  if (field.size() > kMax) return fmt::format("'{}...'", field.substr(0, kMax));
  return fmt::format("'{}'", field);
}

// What one whole field (trimmed) holds.
enum class FieldKind { kNumber, kOutOfRange, kText };

FieldKind classify(std::string_view field, double* value = nullptr) {
  field = trim(field);
  if (!field.empty() && field.front() == '+') {
    field.remove_prefix(1);
    if (!field.empty() && (field.front() == '+' || field.front() == '-')) return FieldKind::kText;
  }
  if (field.empty()) return FieldKind::kText;
  double v = 0;
  const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  if (ptr != field.data() + field.size()) return FieldKind::kText;
  if (ec == std::errc::result_out_of_range) return FieldKind::kOutOfRange;
  if (ec != std::errc()) return FieldKind::kText;
  if (value) *value = v;
  return FieldKind::kNumber;
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      fields.push_back(line.substr(start));
      return fields;
    }
    fields.push_back(line.substr(start, comma - start));
    start = comma + 1;
  }
}

std::string header_name(std::string_view field) {
  field = trim(field);
  if (field.size() >= 2 && field.front() == '"' && field.back() == '"') {
    field = field.substr(1, field.size() - 2);
  }
  return std::string(field);
}

// Reports a bad data line: which field, and why, with the line's own text.
Error line_error(std::string_view source, std::size_t line_no, std::string_view line,
                 std::size_t n_fields) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const std::vector<std::string_view> fields = split_fields(line);
  if (fields.size() != n_fields) {
    return Error{fmt::format("{}:{}: expected {} fields, found {}", source, line_no, n_fields,
                             fields.size())};
  }
  for (std::size_t j = 0; j < fields.size(); ++j) {
    const std::string_view field = trim(fields[j]);
    if (field.empty()) {
      return Error{fmt::format("{}:{}: field {} is empty", source, line_no, j + 1)};
    }
    double value = 0;
    const FieldKind kind = classify(field, &value);
    if (kind == FieldKind::kText) {
      return Error{fmt::format("{}:{}: field {} is not a number: {}", source, line_no, j + 1,
                               quoted(field))};
    }
    if (kind == FieldKind::kOutOfRange) {
      return Error{fmt::format("{}:{}: field {} is out of the range of a double: {}", source,
                               line_no, j + 1, quoted(field))};
    }
    if (!std::isfinite(value)) {
      return Error{fmt::format("{}:{}: field {} is not a finite number: {}", source, line_no, j + 1,
                               quoted(field))};
    }
  }
  return Error{fmt::format("{}:{}: malformed line", source, line_no)};
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Whether the eight bytes at p are all ASCII digits, and their value as a decimal number: the
// bytes' high nibbles must be 3 before and after adding 6 (which carries out of '9'); then pairs,
// quadruples and the octet are combined by three multiplications, in place.
bool eight_digits(const char* p, std::uint64_t& value) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);  // little-endian: the first character in the low byte
  constexpr std::uint64_t kHigh = 0xF0F0F0F0F0F0F0F0ULL, kZeros = 0x3030303030303030ULL;
  if ((v & kHigh) != kZeros || ((v + 0x0606060606060606ULL) & kHigh) != kZeros) return false;
  v -= kZeros;
  v = v * 10 + (v >> 8);  // even bytes: 10·d[2i] + d[2i+1]
  v = ((v & 0x00FF00FF00FF00FFULL) * (1 + (100ULL << 16))) >> 16;    // 100·pair + next pair
  v = ((v & 0x0000FFFF0000FFFFULL) * (1 + (10000ULL << 32))) >> 32;  // 10⁴·quad + next quad
  value = v & 0xFFFFFFFFULL;
  return true;
}

// Reads the digits at p into mantissa (leading zeros of a still-zero mantissa are not
// significant), eight at a time where it can. `count` gets how many digits were read;
// `significant` grows by the significant ones (past 19 the mantissa is garbage: the caller falls
// back to from_chars).
const char* read_digits(const char* p, const char* end, std::uint64_t& mantissa, int& significant,
                        int& count) {
  const char* start = p;
  if (mantissa == 0) {
    while (p < end && *p == '0') ++p;
  }
  std::uint64_t chunk;
  while (end - p >= 8 && significant <= 11 && eight_digits(p, chunk)) {
    mantissa = mantissa * 100000000 + chunk;
    significant += 8;
    p += 8;
  }
  for (; p < end && is_digit(*p); ++p) {
    mantissa = mantissa * 10 + static_cast<unsigned>(*p - '0');
    ++significant;
  }
  count = static_cast<int>(p - start);
  return p;
}

// Parses one finite number at q (no leading blanks), advancing q past it. Most CSV numbers have at
// most 19 significant digits and a small exponent: then mantissa · 10^e with mantissa < 2^53 and
// |e| ≤ 22 is one correctly rounded operation on exact doubles (Clinger's fast path), the same
// value std::from_chars returns. Everything else goes to std::from_chars.
bool parse_number_at(const char*& q, const char* end, double& out) {
  static constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                      1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                      1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  const char* p = q;
  bool negative = false;
  if (p < end && (*p == '-' || *p == '+')) {
    negative = *p == '-';
    ++p;
  }
  const char* number = p;  // from_chars takes no '+'
  std::uint64_t mantissa = 0;
  int significant = 0;
  int exponent = 0;
  int integer_digits = 0, fraction_digits = 0;
  p = read_digits(p, end, mantissa, significant, integer_digits);
  if (p < end && *p == '.') {
    p = read_digits(p + 1, end, mantissa, significant, fraction_digits);
    exponent -= fraction_digits;
  }
  const bool any_digit = integer_digits + fraction_digits > 0;
  bool fast = any_digit && significant <= 19;
  if (fast && p < end && (*p == 'e' || *p == 'E')) {
    const char* e = p + 1;
    bool negative_exponent = false;
    if (e < end && (*e == '-' || *e == '+')) {
      negative_exponent = *e == '-';
      ++e;
    }
    if (e < end && is_digit(*e)) {
      int value = 0;
      for (; e < end && is_digit(*e); ++e) value = std::min(value * 10 + (*e - '0'), 100000);
      exponent += negative_exponent ? -value : value;
      p = e;
    } else {
      fast = false;  // "1e" or "1e+": let from_chars decide what is a number
    }
  }
  if (fast && mantissa == 0) {
    out = negative ? -0.0 : 0.0;
    q = p;
    return true;
  }
  if (fast && mantissa <= (std::uint64_t{1} << 53) && exponent >= -22 && exponent <= 22) {
    double value = static_cast<double>(mantissa);
    value = exponent < 0 ? value / kPow10[-exponent] : value * kPow10[exponent];
    out = negative ? -value : value;
    q = p;
    return true;
  }
  if (number < end && (*number == '-' || *number == '+')) return false;  // "+-1"
  const auto [ptr, ec] = std::from_chars(q < number && *q == '+' ? number : q, end, out);
  if (ec != std::errc() || !std::isfinite(out)) return false;  // "inf", "nan"
  q = ptr;
  return true;
}

// Newlines in [begin, end), eight bytes at a time.
std::size_t count_newlines(const char* begin, const char* end) {
  constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
  constexpr std::uint64_t kLow7 = 0x7f7f7f7f7f7f7f7fULL;
  std::size_t count = 0;
  const char* p = begin;
  for (; end - p >= 8; p += 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    const std::uint64_t x = word ^ (kOnes * '\n');  // zero bytes where '\n' was
    // The high bit of each byte of `zero` is set exactly where x has a zero byte.
    const std::uint64_t zero = ~(((x & kLow7) + kLow7) | x | kLow7);
    // One bit per matching byte, moved to the bottom of its byte and summed into the top byte by
    // the multiplication (no popcnt instruction needed: it is not in baseline x86-64).
    count += static_cast<std::size_t>(((zero >> 7) * kOnes) >> 56);
  }
  for (; p < end; ++p) count += *p == '\n';
  return count;
}

// What parsing a chunk of data lines found.
struct ChunkResult {
  std::size_t rows = 0;
  std::size_t lines = 0;  // newlines consumed, for the line numbers of later chunks
  std::optional<std::size_t> first_row_line;  // chunk-relative 0-based line index
  std::optional<std::size_t> bad_line;        // chunk-relative 0-based line index
  std::string_view bad_text;
};

// At most how many rows [begin, end) holds: its lines.
std::size_t line_count(const char* begin, const char* end) {
  if (begin == end) return 0;
  return count_newlines(begin, end) + (end[-1] == '\n' ? 0 : 1);
}

// Parses the data lines in [begin, end) into column-major storage (feature j of row r at
// out[j * ld + r]), stopping at the first bad line.
ChunkResult parse_chunk(const char* begin, const char* end, std::size_t n_fields, double* out,
                        std::size_t ld) {
  ChunkResult result;
  const char* p = begin;
  while (p < end) {
    const char* line = p;
    while (p < end && is_blank(*p)) ++p;
    if (p == end || *p == '\n' || *p == '\r') {  // a blank line
      while (p < end && *p != '\n') ++p;
      if (p < end) ++p;
      ++result.lines;
      if (std::string_view(line, p - line).find_first_not_of(" \t\r\n") != std::string_view::npos) {
        result.bad_line = result.lines - 1;  // a stray '\r' inside the line
        result.bad_text = std::string_view(line, p - line);
        return result;
      }
      continue;
    }
    double* row = out + result.rows;
    bool ok = true;
    for (std::size_t j = 0; j < n_fields && ok; ++j) {
      while (p < end && is_blank(*p)) ++p;
      double& value = row[j * ld];
      // (The fast path only makes finite numbers: no branch waits for its division.)
      ok = parse_number_at(p, end, value);
      while (ok && p < end && is_blank(*p)) ++p;
      if (ok && j + 1 < n_fields) {
        ok = p < end && *p == ',';
        ++p;
      }
    }
    if (ok && p < end && *p == '\r') ++p;
    ok = ok && (p == end || *p == '\n');
    if (!ok) {
      const char* nl = static_cast<const char*>(std::memchr(line, '\n', end - line));
      result.bad_line = result.lines;
      result.bad_text = std::string_view(line, (nl ? nl : end) - line);
      return result;
    }
    if (p < end) ++p;  // the newline
    if (result.rows == 0) result.first_row_line = result.lines;
    ++result.rows;
    ++result.lines;
  }
  return result;
}

// Inputs smaller than this are parsed on one thread: starting threads costs more.
constexpr std::size_t kParallelBytes = std::size_t{1} << 20;

}  // namespace

Result<NumericTable> parse_numeric_csv(std::string_view text, std::string_view source) {
  NumericTable table;
  // The first non-blank line decides the width and whether there is a header.
  std::size_t pos = 0;
  std::size_t line_no = 0;
  std::string_view first;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    const std::size_t stop = nl == std::string_view::npos ? text.size() : nl;
    ++line_no;
    const std::string_view line = text.substr(pos, stop - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    if (!trim(line).empty()) {
      first = line;
      break;
    }
  }
  if (first.empty()) return Error{fmt::format("{}: empty file (no data rows)", source)};

  if (!first.empty() && first.back() == '\r') first.remove_suffix(1);
  const std::vector<std::string_view> fields = split_fields(first);
  const std::size_t n_fields = fields.size();
  std::size_t numeric = 0, empty = 0;
  std::optional<std::size_t> a_number, a_name;
  for (std::size_t j = 0; j < n_fields; ++j) {
    if (classify(fields[j]) != FieldKind::kText) {
      ++numeric;
      if (!a_number) a_number = j;
    } else if (trim(fields[j]).empty()) {
      ++empty;
    } else if (!a_name) {
      a_name = j;
    }
  }
  std::size_t data_begin = 0;  // offset of the first data line in `text`
  std::size_t data_line = 0;   // its line number, 1-based
  if (numeric == 0) {
    for (std::string_view field : fields) {
      std::string name = header_name(field);
      if (name.empty()) {
        return Error{fmt::format("{}:{}: header has an empty column name (field {})", source,
                                 line_no, table.column_names.size() + 1)};
      }
      table.column_names.push_back(std::move(name));
    }
    data_begin = pos;
    data_line = line_no + 1;
    table.header_line = line_no;
  } else if (numeric + empty == n_fields) {  // data (an empty field is reported below)
    data_begin = static_cast<std::size_t>(first.data() - text.data());
    data_line = line_no;
  } else {
    return Error{fmt::format(
        "{}:{}: first row mixes numbers and text (field {} {} is a number, field {} {} is not): a "
        "header row must be all names, a data row all numbers",
        source, line_no, *a_number + 1, quoted(trim(fields[*a_number])), *a_name + 1,
        quoted(trim(fields[*a_name])))};
  }

  // Split the data into chunks at line boundaries, parse them in parallel into one row-major
  // buffer (each chunk owns the rows its bytes can hold at most), then report the first error.
  const char* begin = text.data() + data_begin;
  const char* end = text.data() + text.size();
  const std::size_t bytes = static_cast<std::size_t>(end - begin);
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t n_chunks =
      bytes < kParallelBytes ? 1 : std::min<std::size_t>(hw, bytes / (kParallelBytes / 2));
  std::vector<const char*> bounds(n_chunks + 1);
  bounds[0] = begin;
  bounds[n_chunks] = end;
  for (std::size_t c = 1; c < n_chunks; ++c) {
    const char* guess = begin + bytes * c / n_chunks;
    guess = std::max(guess, bounds[c - 1]);
    const char* nl = static_cast<const char*>(std::memchr(guess, '\n', end - guess));
    bounds[c] = nl ? nl + 1 : end;
  }
  // Rows per chunk at most (its lines), so that each chunk writes straight into its own rows of
  // one column-major matrix; blank lines leave gaps, closed afterwards.
  std::vector<std::size_t> capacity(n_chunks), offset(n_chunks + 1, 0);
  detail::parallel_for(n_chunks, static_cast<int>(n_chunks),
                       [&](std::size_t c) { capacity[c] = line_count(bounds[c], bounds[c + 1]); });
  for (std::size_t c = 0; c < n_chunks; ++c) offset[c + 1] = offset[c] + capacity[c];
  const std::size_t ld = std::max<std::size_t>(offset[n_chunks], 1);
  Eigen::MatrixXd values(static_cast<Eigen::Index>(ld), static_cast<Eigen::Index>(n_fields));
  std::vector<ChunkResult> results(n_chunks);
  detail::parallel_for(n_chunks, static_cast<int>(n_chunks), [&](std::size_t c) {
    results[c] = parse_chunk(bounds[c], bounds[c + 1], n_fields, values.data() + offset[c], ld);
  });

  std::size_t rows = 0;
  std::size_t lines_before = 0;
  for (std::size_t c = 0; c < n_chunks; ++c) {
    if (results[c].bad_line) {
      return line_error(source, data_line + lines_before + *results[c].bad_line,
                        results[c].bad_text, n_fields);
    }
    if (rows == 0 && results[c].first_row_line) {
      table.first_data_line = data_line + lines_before + *results[c].first_row_line;
    }
    rows += results[c].rows;
    lines_before += results[c].lines;
  }
  if (rows == 0) {
    return Error{fmt::format("{}: no data rows after the header on line {}", source, line_no)};
  }
  if (rows == ld) {
    table.values = std::move(values);
  } else {  // blank lines: close the gaps
    table.values.resize(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(n_fields));
    Eigen::Index to = 0;
    for (std::size_t c = 0; c < n_chunks; ++c) {
      const auto n = static_cast<Eigen::Index>(results[c].rows);
      table.values.middleRows(to, n) = values.middleRows(static_cast<Eigen::Index>(offset[c]), n);
      to += n;
    }
  }
  return table;
}

Result<NumericTable> read_numeric_csv(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{fmt::format("{}: cannot open: {}", path, std::strerror(errno))};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Error{fmt::format("{}: cannot stat: {}", path, std::strerror(err))};
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return Error{fmt::format("{}: is a directory", path)};
  }
  // Regular files are mapped (no copy; MAP_POPULATE: no page faults one by one).
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    const std::size_t size = static_cast<std::size_t>(st.st_size);
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (map != MAP_FAILED) {
      ::close(fd);
      Result<NumericTable> table =
          parse_numeric_csv(std::string_view(static_cast<const char*>(map), size), path);
      ::munmap(map, size);
      return table;
    }
  }
  // Anything else (a pipe, a file that cannot be mapped) is read, growing the buffer. Not
  // zero-filled: it is overwritten.
  std::size_t capacity =
      st.st_size > 0 ? static_cast<std::size_t>(st.st_size) + 1 : std::size_t{1} << 16;
  auto buffer = std::make_unique_for_overwrite<char[]>(capacity);
  std::size_t size = 0;
  while (true) {
    if (size == capacity) {
      auto bigger = std::make_unique_for_overwrite<char[]>(capacity * 2);
      std::memcpy(bigger.get(), buffer.get(), size);
      buffer = std::move(bigger);
      capacity *= 2;
    }
    const ssize_t got = ::read(fd, buffer.get() + size, capacity - size);
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Error{fmt::format("{}: cannot read: {}", path, std::strerror(err))};
    }
    if (got == 0) break;
    size += static_cast<std::size_t>(got);
  }
  ::close(fd);
  return parse_numeric_csv(std::string_view(buffer.get(), size), path);
}

}  // namespace eacgm
