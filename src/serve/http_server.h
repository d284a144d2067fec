// The read-only HTTP endpoint of `eacgm serve`: GET /metrics, /healthz and
// /anomalies, served by cpp-httplib on a small fixed pool of threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/result.h"

namespace eacgm {

struct ListenAddress {
  std::string host;
  uint16_t port = 0;
};
// "127.0.0.1:9412", "[::1]:9412", "0.0.0.0:9412"; the host must be an IP literal.
Result<ListenAddress> parse_listen_address(const std::string& text);

class HttpServer {
 public:
  struct Handlers {
    std::function<std::string()> metrics;    // Prometheus text
    std::function<std::string()> anomalies;  // JSON
    std::function<std::string()> health;     // JSON
  };
  // Binds at once (so a port in use is an error before anything else is set
  // up) and serves on a thread of its own.
  static Result<std::unique_ptr<HttpServer>> start(const ListenAddress& address, Handlers handlers);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  uint16_t port() const { return port_; }

 private:
  HttpServer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  uint16_t port_ = 0;
};

}  // namespace eacgm
