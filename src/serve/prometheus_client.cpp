#include "serve/prometheus_client.h"

#include <fmt/format.h>
#include <httplib.h>

namespace eacgm {

Result<PrometheusClient> PrometheusClient::open(const std::string& url) {
  const size_t scheme = url.starts_with("http://") ? 7 : url.starts_with("https://") ? 8 : 0;
  if (scheme == 0) {
    return Error{fmt::format("--prometheus {}: expected an http:// or https:// URL", url)};
  }
  const size_t slash = url.find('/', scheme);
  PrometheusClient client;
  client.url_ = url;
  client.origin_ = url.substr(0, slash);
  client.prefix_ = slash == std::string::npos ? "" : url.substr(slash);
  while (!client.prefix_.empty() && client.prefix_.back() == '/') client.prefix_.pop_back();
  if (client.origin_.size() <= scheme) return Error{fmt::format("--prometheus {}: no host", url)};
  return client;
}

Result<nlohmann::json> PrometheusClient::query(const std::string& promql) const {
  httplib::Client http(origin_);
  http.set_connection_timeout(5, 0);
  http.set_read_timeout(30, 0);
  const httplib::Params params = {{"query", promql}};
  auto res = http.Get(prefix_ + "/api/v1/query", params, httplib::Headers{});
  if (!res) {
    return Error{
        fmt::format("cannot reach Prometheus at {}: {}", url_, httplib::to_string(res.error()))};
  }
  nlohmann::json body = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return Error{
        fmt::format("{} answered HTTP {} without a Prometheus API response", url_, res->status)};
  }
  if (body.value("status", "") != "success") {
    return Error{fmt::format("Prometheus at {} refused the query {}: {}", url_, promql,
                             body.value("error", fmt::format("HTTP {}", res->status)))};
  }
  return body["data"]["result"];
}

}  // namespace eacgm
