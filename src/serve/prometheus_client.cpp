#include "serve/prometheus_client.h"

#include <fmt/format.h>
#include <httplib.h>
#include <netdb.h>

namespace eacgm {
namespace {

// "prom" of "http://prom:9090", "::1" of "http://[::1]:9090".
std::string host_of(const std::string& origin) {
  std::string rest = origin.substr(origin.find("://") + 3);
  if (rest.starts_with('[')) return rest.substr(1, rest.find(']') - 1);
  return rest.substr(0, rest.find(':'));
}

// httplib names its errors in one word ("Connection"), which read as a truncated sentence at
// the end of a message: what failed, in words, with httplib's name for it kept for searches.
std::string describe_failure(httplib::Error error, const std::string& origin) {
  std::string what;
  switch (error) {
    case httplib::Error::Connection: {
      const std::string host = host_of(origin);
      addrinfo* found = nullptr;
      const int gai = getaddrinfo(host.c_str(), nullptr, nullptr, &found);
      if (found) freeaddrinfo(found);
      what = gai != 0
                 ? fmt::format("the host name '{}' does not resolve: {}", host, gai_strerror(gai))
                 : fmt::format(
                       "nothing accepted a connection at {}: refused, or the host is "
                       "unreachable",
                       origin);
      break;
    }
    case httplib::Error::ConnectionTimeout:
      what = fmt::format("connecting to {} timed out after 5 s", origin);
      break;
    case httplib::Error::Read:
      what = "the connection failed while reading the answer, or no answer came within 30 s";
      break;
    case httplib::Error::Write:
      what = "the connection failed while sending the query";
      break;
    case httplib::Error::SSLConnection:
      what = "the TLS handshake failed (is it an https:// server?)";
      break;
    case httplib::Error::SSLServerVerification:
      what = "the server's TLS certificate could not be verified";
      break;
    case httplib::Error::ExceedRedirectCount:
      what = "it redirected too many times";
      break;
    default:
      what = "the request failed";
      break;
  }
  return fmt::format("{} (httplib error: {})", what, httplib::to_string(error));
}

}  // namespace

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
    return Error{fmt::format(
        "cannot reach Prometheus at {}: {}. Check that the URL is right, that Prometheus runs "
        "there and listens on that address (`curl {}{}/-/ready` answers \"Prometheus Server is "
        "Ready.\"), and that no firewall or proxy is in the way.",
        url_, describe_failure(res.error(), origin_), origin_, prefix_)};
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
