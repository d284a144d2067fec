#include "cli/gmm_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "analysis/gmm.h"
#include "analysis/gmm_fit.h"
#include "analysis/gmm_io.h"
#include "analysis/numeric_csv.h"
#include "common/exit_codes.h"

namespace eacgm {
namespace {

struct FitArgs {
  std::string input;
  std::string components;
  std::string covariance = "full";
  bool covariance_given = false;  // --covariance on the command line
  std::uint64_t seed = 0;
  int n_init = 1;
  int init_candidates = 8;
  int max_iter = 100;
  double tol = 1e-3;
  double reg_covar = 1e-6;
  std::string init;
  int k_min = 1;
  int k_max = 10;
  int threads = 0;
  std::string output;
  bool quiet = false;
  bool timing = false;
};

struct ScoreArgs {
  std::string model;
  std::string input;
  std::string output;
  bool responsibilities = false;
  int threads = 0;
  bool timing = false;
};

// Wall-clock phases for --timing, printed on stderr.
class PhaseTimer {
 public:
  explicit PhaseTimer(bool enabled) : enabled_(enabled) {}
  // Ends the current phase, naming it.
  void lap(const char* name) {
    const auto now = std::chrono::steady_clock::now();
    if (enabled_) {
      text_ += fmt::format("{}{} {:.1f} ms", text_.empty() ? "" : ", ", name,
                           std::chrono::duration<double, std::milli>(now - last_).count());
    }
    last_ = now;
  }
  double seconds_since_start() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void print() const {
    if (enabled_)
      fmt::print(stderr, "eacgm gmm: timing: {}; total {:.1f} ms\n", text_,
                 seconds_since_start() * 1e3);
  }

 private:
  bool enabled_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_;
  std::string text_;
};

int bad_input(const std::string& message) {
  fmt::print(stderr, "eacgm gmm: error: {}\n", message);
  return kExitUsage;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ",") + name;
  return out;
}

// The CSV's columns against a model's features: same count, same names when both have names.
std::optional<std::string> check_columns(const NumericTable& table, const std::string& input,
                                         const GaussianMixture& model,
                                         const std::string& model_path) {
  if (table.values.cols() != model.n_features()) {
    return fmt::format("{}:{}: {} fields per row, but model {} has {} features", input,
                       table.first_data_line, table.values.cols(), model_path, model.n_features());
  }
  if (!table.column_names.empty() && !model.feature_names().empty() &&
      table.column_names != model.feature_names()) {
    return fmt::format("{}:{}: columns '{}' differ from the features of model {}: '{}'", input,
                       table.header_line, join(table.column_names), model_path,
                       join(model.feature_names()));
  }
  return std::nullopt;
}

int run_fit(const FitArgs& args) {
  PhaseTimer timer(args.timing);
  GmmFitOptions options;
  const std::optional<CovarianceType> type = covariance_type_from_name(args.covariance);
  if (!type) return bad_input(fmt::format("unknown covariance type '{}'", args.covariance));
  options.covariance_type = *type;
  options.seed = args.seed;
  options.n_init = args.n_init;
  options.init_candidates = args.init_candidates;
  options.max_iter = args.max_iter;
  options.tol = args.tol;
  options.reg_covar = args.reg_covar;
  options.threads = args.threads;
  if (args.n_init < 1) return bad_input("--n-init must be at least 1");
  if (args.init_candidates < 1) return bad_input("--init-candidates must be at least 1");
  if (args.max_iter < 1) return bad_input("--max-iter must be at least 1");
  if (!(args.tol >= 0)) return bad_input("--tol must be a non-negative number");
  if (!(args.reg_covar >= 0) || !std::isfinite(args.reg_covar)) {
    return bad_input("--reg-covar must be a non-negative number");
  }
  if (args.threads < 0) return bad_input("--threads must be 0 (all) or more");

  const bool auto_k = args.components == "auto";
  if (!auto_k && !args.components.empty()) {
    int k = 0;
    const char* end = args.components.data() + args.components.size();
    const auto [ptr, ec] = std::from_chars(args.components.data(), end, k);
    if (ec != std::errc() || ptr != end || k < 1) {
      return bad_input(fmt::format("-k must be a positive number of components or 'auto', not '{}'",
                                   args.components));
    }
    options.n_components = k;
  }
  if (auto_k && (args.k_min < 1 || args.k_max < args.k_min)) {
    return bad_input(fmt::format("--k-min {} and --k-max {} do not make a range of components",
                                 args.k_min, args.k_max));
  }
  std::optional<GaussianMixture> init_model;
  if (!args.init.empty()) {
    if (auto_k) return bad_input("-k auto and --init exclude each other");
    Result<GaussianMixture> init = load_gmm(args.init);
    if (!init) return bad_input(init.error().message);
    if (!args.components.empty() && options.n_components != init->n_components()) {
      return bad_input(fmt::format("-k {} but the initial model {} has {} components",
                                   options.n_components, args.init, init->n_components()));
    }
    if (args.covariance_given && options.covariance_type != init->covariance_type()) {
      return bad_input(fmt::format("--covariance {} but the initial model {} is {}",
                                   args.covariance, args.init,
                                   covariance_type_name(init->covariance_type())));
    }
    options.n_components = init->n_components();
    options.covariance_type = init->covariance_type();
    init_model = std::move(init.value());
    options.init = &*init_model;
  } else if (args.components.empty()) {
    return bad_input("-k is required (a number of components, or 'auto'), unless --init is given");
  }

  Result<NumericTable> table = read_numeric_csv(args.input);
  if (!table) return bad_input(table.error().message);
  timer.lap("read");
  if (options.init) {
    if (auto error = check_columns(*table, args.input, *options.init, args.init)) {
      return bad_input(*error);
    }
  }
  const Eigen::Index n = table->values.rows();
  const int fewest = auto_k ? args.k_min : options.n_components;
  if (n < fewest) {
    return bad_input(
        fmt::format("{}: {} samples are too few for {} components", args.input, n, fewest));
  }

  Result<GmmFit> fit = auto_k ? fit_gmm_select_k(table->values, options, args.k_min, args.k_max)
                              : fit_gmm(table->values, options);
  if (!fit) {
    fmt::print(stderr, "eacgm gmm: error: {}: {}\n", args.input, fit.error().message);
    return kExitFailed;
  }
  timer.lap("fit");
  // The CSV's header names the features; without one, an initial model's names carry over.
  fit->model.set_feature_names(!table->column_names.empty() || !options.init
                                   ? table->column_names
                                   : options.init->feature_names());
  const GmmFitInfo& info = fit->info;
  if (auto_k) options.n_components = fit->model.n_components();
  Result<void> saved = save_gmm(args.output, fit->model, &info, &options);
  if (!saved) return bad_input(saved.error().message);
  timer.lap("write");
  timer.print();

  if (!info.converged) {
    fmt::print(stderr,
               "eacgm gmm: warning: EM did not converge in {} iterations (last change above "
               "--tol {}); raise --max-iter or --tol\n",
               info.n_iter, args.tol);
  }
  if (!args.quiet) {
    if (auto_k) {
      std::string table_text;
      for (const auto& [k, bic] : info.bic_by_k) table_text += fmt::format(" {}:{:.1f}", k, bic);
      fmt::print("k chosen by BIC over {}..{}: {} (BIC by k:{})\n", args.k_min,
                 std::min<Eigen::Index>(args.k_max, n), fit->model.n_components(), table_text);
    }
    fmt::print(
        "fitted {} {} component{} to {} samples x {} features in {} iteration{}{}: mean "
        "log-likelihood {:.6f}, BIC {:.1f} -> {}\n",
        fit->model.n_components(), covariance_type_name(fit->model.covariance_type()),
        fit->model.n_components() == 1 ? "" : "s", n, table->values.cols(), info.n_iter,
        info.n_iter == 1 ? "" : "s", info.converged ? "" : " (not converged)",
        info.mean_log_likelihood, info.bic, args.output);
  }
  return kExitOk;
}

// Appends the shortest text that reads back as exactly `value`.
void append_number(std::string& out, double value) {
  char buf[32];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, ec == std::errc() ? ptr : buf);
}

int run_score(const ScoreArgs& args) {
  PhaseTimer timer(args.timing);
  if (args.threads < 0) return bad_input("--threads must be 0 (all) or more");
  Result<GaussianMixture> model = load_gmm(args.model);
  if (!model) return bad_input(model.error().message);
  model->set_threads(args.threads);
  Result<NumericTable> table = read_numeric_csv(args.input);
  if (!table) return bad_input(table.error().message);
  if (auto error = check_columns(*table, args.input, *model, args.model)) {
    return bad_input(*error);
  }
  timer.lap("read");
  const auto score_start = std::chrono::steady_clock::now();
  const GmmSampleScores scores = model->score_detailed(table->values);
  Eigen::MatrixXd resp;
  if (args.responsibilities) resp = model->predict_proba(table->values);
  const double score_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - score_start).count();
  timer.lap("score");

  std::FILE* out = stdout;
  if (!args.output.empty()) {
    out = std::fopen(args.output.c_str(), "wb");
    if (!out) {
      return bad_input(fmt::format("{}: cannot write: {}", args.output, std::strerror(errno)));
    }
  }
  std::string buffer = "log_likelihood,component,mahalanobis";
  for (int k = 0; args.responsibilities && k < model->n_components(); ++k) {
    buffer += fmt::format(",p{}", k);
  }
  buffer += '\n';
  bool ok = true;
  const Eigen::Index n = table->values.rows();
  for (Eigen::Index i = 0; i < n && ok; ++i) {
    append_number(buffer, scores.log_likelihood[i]);
    buffer += ',';
    append_number(buffer, scores.component[i]);
    buffer += ',';
    append_number(buffer, scores.mahalanobis[i]);
    for (Eigen::Index k = 0; k < resp.cols(); ++k) {
      buffer += ',';
      append_number(buffer, resp(i, k));
    }
    buffer += '\n';
    if (buffer.size() >= (1 << 20) || i + 1 == n) {
      ok = std::fwrite(buffer.data(), 1, buffer.size(), out) == buffer.size();
      buffer.clear();
    }
  }
  const bool flushed = out == stdout ? std::fflush(out) == 0 : std::fclose(out) == 0;
  if (!ok || !flushed) {
    return bad_input(fmt::format("{}: cannot write: {}",
                                 args.output.empty() ? "stdout" : args.output,
                                 std::strerror(errno)));
  }
  timer.lap("write");
  timer.print();
  if (args.timing) {
    fmt::print(stderr, "eacgm gmm: scoring: {} samples in {:.2f} ms, {:.1f} M samples/s\n", n,
               score_s * 1e3, static_cast<double>(n) / score_s / 1e6);
  }
  if (!args.output.empty()) {
    fmt::print("scored {} samples: mean log-likelihood {:.6f} -> {}\n", n,
               scores.log_likelihood.mean(), args.output);
  }
  return kExitOk;
}

}  // namespace

void add_gmm_command(CLI::App& app, std::function<int()>& run) {
  CLI::App* gmm = app.add_subcommand("gmm", "Gaussian mixture models on numeric CSV files");
  gmm->require_subcommand(1);

  auto fit_args = std::make_shared<FitArgs>();
  CLI::App* fit = gmm->add_subcommand(
      "fit", "fit a Gaussian mixture to the rows of a numeric CSV file (EM, k-means++ start)");
  fit->add_option("-i,--input", fit_args->input, "numeric CSV, optional header row")->required();
  fit->add_option("-k,--components", fit_args->components,
                  "number of components, or 'auto' to choose it by BIC over --k-min..--k-max");
  CLI::Option* covariance = fit->add_option("--covariance", fit_args->covariance, "covariance type")
                                ->check(CLI::IsMember({"full", "diag", "spherical"}))
                                ->capture_default_str();
  fit->add_option("--seed", fit_args->seed, "random seed")->capture_default_str();
  fit->add_option("--n-init", fit_args->n_init, "restarts; the best lower bound is kept")
      ->capture_default_str();
  fit->add_option("--init-candidates", fit_args->init_candidates,
                  "k-means++ starts screened per restart by a short EM (1: one start, as sklearn)")
      ->capture_default_str();
  fit->add_option("--max-iter", fit_args->max_iter, "EM iterations per restart")
      ->capture_default_str();
  fit->add_option("--tol", fit_args->tol,
                  "stop when the mean log-likelihood changes by less than this")
      ->capture_default_str();
  fit->add_option("--reg-covar", fit_args->reg_covar, "added to every covariance's diagonal")
      ->capture_default_str();
  fit->add_option("--init", fit_args->init,
                  "start EM from this model's parameters instead of k-means++");
  fit->add_option("--k-min", fit_args->k_min, "smallest k tried by -k auto")->capture_default_str();
  fit->add_option("--k-max", fit_args->k_max, "largest k tried by -k auto")->capture_default_str();
  fit->add_option("--threads", fit_args->threads, "threads (0: all hardware threads)")
      ->capture_default_str();
  fit->add_option("-o,--output", fit_args->output, "model JSON file to write")->required();
  fit->add_flag("-q,--quiet", fit_args->quiet, "print nothing on success");
  fit->add_flag("--timing", fit_args->timing, "print how long each phase took (stderr)");
  fit->callback([fit_args, covariance, &run] {
    fit_args->covariance_given = covariance->count() > 0;
    run = [fit_args] { return guarded([&] { return run_fit(*fit_args); }, "eacgm gmm"); };
  });

  auto score_args = std::make_shared<ScoreArgs>();
  CLI::App* score = gmm->add_subcommand(
      "score", "score every row of a CSV file: log-likelihood, most likely component, distance");
  score->add_option("-m,--model", score_args->model, "model JSON from 'eacgm gmm fit'")->required();
  score->add_option("-i,--input", score_args->input, "numeric CSV, optional header row")
      ->required();
  score->add_option("-o,--output", score_args->output, "CSV file to write (default: stdout)");
  score->add_flag("--responsibilities", score_args->responsibilities,
                  "add columns p0..p(k-1): the probability of each component");
  score->add_option("--threads", score_args->threads, "threads (0: all hardware threads)")
      ->capture_default_str();
  score->add_flag("--timing", score_args->timing,
                  "print how long each phase took and the scoring rate (stderr)");
  score->callback([score_args, &run] {
    run = [score_args] { return guarded([&] { return run_score(*score_args); }, "eacgm gmm"); };
  });
}

}  // namespace eacgm
