// MetricsHttpServer over real sockets: the answers, keep-alive and pipelining, idle
// connections that must not delay a request (issue 46), the connection cap, the idle timeout.
#include "daemon/metrics/metrics_http_server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace kvstrata {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class HttpTest : public ::testing::Test {
 protected:
  void Start(MetricsHttpOptions options = {}) {
    options.address = "127.0.0.1:0";
    auto server = MetricsHttpServer::Start(options, [] { return std::string("page 1\n"); });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  int Connect() const {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    return fd;
  }
  static void Send(int fd, const std::string& text) {
    ASSERT_EQ(send(fd, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
  }
  // One response (headers and Content-Length bytes of body, none for HEAD); what came
  // after it is kept for the next call. "" if the peer closed first.
  std::string Response(int fd, bool head = false) {
    std::string& text = pending_[fd];
    char buffer[4096];
    while (true) {
      size_t end = text.find("\r\n\r\n");
      if (end != std::string::npos) {
        size_t at = text.find("Content-Length: ");
        size_t length = head ? 0 : std::stoul(text.substr(at + 16));
        if (text.size() >= end + 4 + length) {
          std::string one = text.substr(0, end + 4 + length);
          text.erase(0, one.size());
          return one;
        }
      }
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 5000) != 1) return "";
      ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
      if (got <= 0) return "";
      text.append(buffer, static_cast<size_t>(got));
    }
  }
  // Whether the server closed `fd` (within `ms`).
  static bool Closed(int fd, int ms = 2000) {
    pollfd p{fd, POLLIN, 0};
    char c;
    return poll(&p, 1, ms) == 1 && recv(fd, &c, 1, 0) == 0;
  }
  std::unique_ptr<MetricsHttpServer> server_;
  std::map<int, std::string> pending_;  // received, not yet returned by Response
};

constexpr char kGet[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";

TEST_F(HttpTest, AnswersMetricsAndRefusesTheRest) {
  Start();
  int fd = Connect();
  Send(fd, kGet);
  std::string ok = Response(fd);
  EXPECT_THAT(ok, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(ok, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(ok, HasSubstr("\r\n\r\npage 1\n"));
  Send(fd, "HEAD /metrics?x=1 HTTP/1.1\r\n\r\n");
  std::string head = Response(fd, /*head=*/true);
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(head, HasSubstr("Content-Length: 7\r\n"));
  Send(fd, "GET /other HTTP/1.1\r\n\r\n");
  EXPECT_THAT(Response(fd), StartsWith("HTTP/1.1 404"));
  Send(fd, "DELETE /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(Response(fd), StartsWith("HTTP/1.1 405"));
  Send(fd, "nonsense\r\n\r\n");
  EXPECT_THAT(Response(fd), StartsWith("HTTP/1.1 400"));
  EXPECT_TRUE(Closed(fd));
  close(fd);
  EXPECT_EQ(server_->pages_served(), 2u);
}

TEST_F(HttpTest, PipelinedRequestsAndConnectionClose) {
  Start();
  int fd = Connect();
  Send(fd, std::string(kGet) + kGet + "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n");
  for (int i = 0; i < 3; ++i) EXPECT_THAT(Response(fd), StartsWith("HTTP/1.1 200")) << i;
  EXPECT_TRUE(Closed(fd));
  close(fd);
  fd = Connect();  // HTTP/1.0 closes unless asked to keep the connection.
  Send(fd, "GET /metrics HTTP/1.0\r\n\r\n");
  EXPECT_THAT(Response(fd), HasSubstr("Connection: close"));
  EXPECT_TRUE(Closed(fd));
  close(fd);
}

TEST_F(HttpTest, IdleConnectionsDoNotDelayARequest) {
  Start();
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) idle.push_back(Connect());
  int fd = Connect();
  auto start = std::chrono::steady_clock::now();
  Send(fd, kGet);
  EXPECT_THAT(Response(fd), StartsWith("HTTP/1.1 200"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
  EXPECT_GE(server_->open_connections(), 200u);
  for (int i : idle) close(i);
  close(fd);
}

TEST_F(HttpTest, ANewConnectionBeyondTheCapClosesTheIdlest) {
  MetricsHttpOptions options;
  options.max_connections = 4;
  Start(options);
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(Connect());
    Send(idle.back(), kGet);  // answered: each has been seen, the first one longest ago
    EXPECT_THAT(Response(idle.back()), StartsWith("HTTP/1.1 200"));
  }
  int fd = Connect();
  Send(fd, kGet);
  EXPECT_THAT(Response(fd), StartsWith("HTTP/1.1 200"));
  EXPECT_TRUE(Closed(idle[0]));
  EXPECT_FALSE(Closed(idle[3], 100));
  EXPECT_LE(server_->open_connections(), 4u);
  for (int i : idle) close(i);
  close(fd);
}

TEST_F(HttpTest, SilentConnectionsAreClosedAfterTheIdleTimeout) {
  MetricsHttpOptions options;
  options.idle_timeout = absl::Milliseconds(100);
  Start(options);
  int fd = Connect();
  EXPECT_TRUE(Closed(fd, 3000));
  close(fd);
}

TEST_F(HttpTest, AnAddressInUseIsUnavailable) {
  Start();
  std::string address = "127.0.0.1:" + std::to_string(server_->port());
  auto second = MetricsHttpServer::Start({.address = address}, [] { return std::string(); });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(address));
}

}  // namespace
}  // namespace kvstrata
