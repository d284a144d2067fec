#include "serve/http_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace eacgm {
namespace {

// Requests are small GETs: anything with a body is refused, and a few
// threads are plenty for Prometheus and a person with curl.
constexpr size_t kMaxPayloadBytes = 1024;
constexpr size_t kThreads = 2;

}  // namespace

struct HttpServer::Impl {
  httplib::Server server;
};

Result<ListenAddress> parse_listen_address(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Error{fmt::format("--listen {}: expected HOST:PORT, e.g. 127.0.0.1:9412", text)};
  }
  ListenAddress address;
  address.host = text.substr(0, colon);
  if (address.host.size() > 2 && address.host.front() == '[' && address.host.back() == ']') {
    address.host = address.host.substr(1, address.host.size() - 2);
  }
  unsigned char buf[sizeof(in6_addr)];
  if (inet_pton(AF_INET, address.host.c_str(), buf) != 1 &&
      inet_pton(AF_INET6, address.host.c_str(), buf) != 1) {
    return Error{fmt::format("--listen {}: '{}' is not an IP address", text, address.host)};
  }
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  const unsigned long value = std::strtoul(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || value > 65535) {
    return Error{fmt::format("--listen {}: '{}' is not a port number (0-65535)", text, port)};
  }
  address.port = static_cast<uint16_t>(value);
  return address;
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const ListenAddress& address,
                                                      Handlers handlers) {
  std::unique_ptr<HttpServer> self(new HttpServer());
  self->impl_ = std::make_unique<Impl>();
  httplib::Server& server = self->impl_->server;
  // httplib's default also sets SO_REUSEPORT, which would let a second agent
  // share the port silently; a port in use must be an error.
  server.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server.set_payload_max_length(kMaxPayloadBytes);
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  // Read-only: any other method is 405 with the methods that are served (RFC 9110: the answer
  // says which). httplib itself answers 400 for a method without handlers, which reads as a
  // malformed request. Before routing, so a POST body is never read.
  server.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (req.method == "GET" || req.method == "HEAD")
      return httplib::Server::HandlerResponse::Unhandled;
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_content(
        fmt::format("eacgm serve is read-only: {} is not allowed; use GET\n", req.method),
        "text/plain");
    return httplib::Server::HandlerResponse::Handled;
  });
  server.Get("/metrics", [h = handlers.metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(h(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/anomalies",
             [h = handlers.anomalies](const httplib::Request&, httplib::Response& res) {
               res.set_content(h(), "application/json");
             });
  server.Get("/healthz", [h = handlers.health](const httplib::Request&, httplib::Response& res) {
    res.set_content(h(), "application/json");
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("eacgm serve: /metrics /healthz /anomalies\n", "text/plain");
  });

  errno = 0;
  int port = address.port;
  bool bound = false;
  if (address.port == 0) {
    port = server.bind_to_any_port(address.host);
    bound = port > 0;
  } else {
    bound = server.bind_to_port(address.host, address.port);
  }
  if (!bound) {
    const int err = errno;
    return Error{fmt::format("cannot listen on {}:{}: {}", address.host, address.port,
                             err ? std::strerror(err) : "address unavailable")};
  }
  self->port_ = static_cast<uint16_t>(port);
  self->thread_ = std::thread([impl = self->impl_.get()] { impl->server.listen_after_bind(); });
  return self;
}

HttpServer::~HttpServer() {
  if (impl_) impl_->server.stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace eacgm
