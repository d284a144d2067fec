// Instant PromQL queries over a Prometheus server's HTTP API (/api/v1/query),
// for `eacgm cluster`.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/result.h"

namespace eacgm {

class PrometheusClient {
 public:
  // `url`: http://HOST:PORT, optionally with a path prefix (http://host/prometheus).
  static Result<PrometheusClient> open(const std::string& url);
  // The `data.result` array of an instant query; an error says why there is none
  // (unreachable server, HTTP status, a PromQL error).
  Result<nlohmann::json> query(const std::string& promql) const;
  const std::string& url() const { return url_; }

 private:
  std::string url_;
  std::string origin_;  // scheme://host:port
  std::string prefix_;  // path before /api/v1
};

}  // namespace eacgm
