#include "client/cli/metrics_page.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kvstrata {
namespace {

absl::Status Unavailable(const std::string& address, const std::string& why) {
  return absl::UnavailableError(absl::StrCat("cannot read metrics at ", address, ": ", why));
}

}  // namespace

absl::StatusOr<MetricsPage> MetricsPage::Fetch(const std::string& address, absl::Duration timeout) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return Unavailable(address, "not host:port");
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return Unavailable(address, "unknown host");
  }
  int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int rc = fd < 0 ? -1 : connect(fd, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  if (rc != 0) {
    if (fd >= 0) close(fd);
    return Unavailable(address, "connection refused");
  }
  std::string request = absl::StrCat("GET /metrics HTTP/1.0\r\nHost: ", host, "\r\n\r\n");
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size())) {
    close(fd);
    return Unavailable(address, "send failed");
  }
  std::string response;
  absl::Time deadline = absl::Now() + timeout;
  char buffer[65536];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (left <= 0 || poll(&p, 1, left) <= 0) {
      close(fd);
      return Unavailable(address, "timed out");
    }
    ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    response.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || body == std::string::npos ||
      response.find(" 200 ") > response.find("\r\n")) {
    return Unavailable(address, "not an HTTP 200 answer");
  }
  return Parse(response.substr(body + 4));
}

MetricsPage MetricsPage::Parse(const std::string& text) {
  MetricsPage page;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    Sample sample;
    size_t brace = line.find('{');
    size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    if (brace != std::string::npos && brace < space) {
      sample.name = line.substr(0, brace);
      size_t close = line.rfind('}');
      std::string labels = line.substr(brace + 1, close - brace - 1);
      size_t pos = 0;
      while (pos < labels.size()) {
        size_t eq = labels.find("=\"", pos);
        if (eq == std::string::npos) break;
        size_t end = labels.find('"', eq + 2);
        while (end != std::string::npos && labels[end - 1] == '\\') end = labels.find('"', end + 1);
        if (end == std::string::npos) break;
        sample.labels[labels.substr(pos, eq - pos)] = labels.substr(eq + 2, end - eq - 2);
        pos = labels.find(',', end);
        pos = pos == std::string::npos ? labels.size() : pos + 1;
      }
    } else {
      sample.name = line.substr(0, space);
    }
    if (!absl::SimpleAtod(line.substr(space + 1), &sample.value)) continue;
    page.samples_.push_back(std::move(sample));
  }
  return page;
}

double MetricsPage::Sum(const std::string& name,
                        const std::map<std::string, std::string>& match) const {
  double total = 0;
  for (const Sample& s : samples_) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [key, value] : match) {
      auto it = s.labels.find(key);
      ok = ok && it != s.labels.end() && it->second == value;
    }
    if (ok) total += s.value;
  }
  return total;
}

}  // namespace kvstrata
