#include "cli/serve_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "agent/serve_session.h"
#include "cli/agent_flags.h"
#include "cli/numeric_flags.h"
#include "common/exit_codes.h"

namespace eacgm {

void add_serve_command(CLI::App& app, std::function<int()>& run) {
  struct Args {
    ServeOptions options;
    std::string layers;
  };
  auto args = std::make_shared<Args>();
  CLI::App* serve = app.add_subcommand(
      "serve", "trace every process that uses a traced library; serve Prometheus /metrics");
  serve
      ->add_option("--listen", args->options.listen,
                   "HOST:PORT to serve /metrics, /healthz and /anomalies on")
      ->capture_default_str();
  serve->add_option("--cgroup", args->options.cgroup,
                    "trace only processes in this cgroup v2 (a directory of the hierarchy or a "
                    "path below its root)");
  serve
      ->add_option("--scan-interval", args->options.scan_interval_s,
                   "seconds between searches of /proc for new processes")
      ->capture_default_str()
      ->check(bounded(0.05, 60, "seconds"));
  add_agent_flags(serve, args->options.agent, args->layers,
                  {.layers = layer_names([](const LayerInfo& l) { return l.serve_by_default; }),
                   .gpu_rate_hz = 1.0,
                   .python = false});
  serve->callback([args, &run] {
    run = [args] {
      std::string error;
      auto layers = parse_layers(args->layers, error);
      if (!layers) return fail(kExitUsage, error);
      for (Layer layer : *layers) {
        if (const std::string_view why = layer_info(layer).not_in_serve; !why.empty()) {
          return fail(kExitUsage,
                      fmt::format("the {} layer is for `eacgm record` and `eacgm attach` ({}); "
                                  "serve traces {}",
                                  layer_name(layer), why, layer_names([](const LayerInfo& l) {
                                    return l.not_in_serve.empty();
                                  })));
        }
      }
      args->options.agent.layers = *layers;
      return run_serve(args->options);
    };
  });
}

}  // namespace eacgm
