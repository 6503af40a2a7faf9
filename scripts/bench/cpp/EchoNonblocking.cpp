// The C++ reference for the echo benchmark: Apache Thrift's TNonblockingServer (one
// libevent I/O thread, a ThreadManager of worker threads, framed transport, binary
// protocol), serving `service Echo` of idl/demo.thrift; with a certificate directory,
// over TNonblockingSSLServerSocket with client certificates required (mutual TLS, as
// the Python servers are configured in scripts/bench/peer_servers.py).
//
// Built at benchmark time by bench_servers.py: `thrift --gen cpp` on idl/demo.thrift,
// then g++ against Debian's libthrift-dev (libthrift, libthriftnb), libevent and
// OpenSSL.
//
// Usage: EchoNonblocking PORT WORKER_THREADS [CERT_DIR]
//   CERT_DIR holds server.pem, server.key and ca.pem (scripts/bench/tls_certs.py).
// Prints "listening PORT" once the socket is set up, then serves until killed.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <thrift/concurrency/ThreadFactory.h>
#include <thrift/concurrency/ThreadManager.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/server/TNonblockingServer.h>
#include <thrift/transport/TNonblockingSSLServerSocket.h>
#include <thrift/transport/TNonblockingServerSocket.h>
#include <thrift/transport/TSSLSocket.h>

#include "Echo.h"

using apache::thrift::concurrency::ThreadFactory;
using apache::thrift::concurrency::ThreadManager;
using apache::thrift::protocol::TBinaryProtocolFactory;
using apache::thrift::server::TNonblockingServer;
using apache::thrift::transport::AccessManager;
using apache::thrift::transport::SSLTLS;
using apache::thrift::transport::TNonblockingServerSocket;
using apache::thrift::transport::TNonblockingSSLServerSocket;
using apache::thrift::transport::TSSLSocketFactory;

namespace {

// Echo semantics as in nimbus_thrift.demo.EchoHandler; only echo is benchmarked.
class Handler : public nimbus_demo::EchoIf {
public:
  void echo(std::string& out, const std::string& s) override { out = s; }
  void echo_binary(std::string& out, const std::string& data) override { out = data; }
  void ping() override {}
  void notify(const std::string&) override {}
  void events(std::vector<std::string>&) override {}
  void fail(std::string&, const std::string& kind) override {
    nimbus_demo::DemoError e;
    e.message = "fail(" + kind + ")";
    e.code = 42;
    throw e;
  }
  int32_t sleep(const int32_t millis) override { return millis; }
};

// OpenSSL still checks the client's certificate against the CA; the default access
// manager would also match the client's address against names in its certificate,
// which the Python servers do not do (and the benchmark's client certificate has none).
class AnyVerifiedClient : public AccessManager {
public:
  Decision verify(const sockaddr_storage&) noexcept override { return ALLOW; }
  Decision verify(const std::string&, const char*, int) noexcept override { return ALLOW; }
  Decision verify(const sockaddr_storage&, const char*, int) noexcept override { return ALLOW; }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: EchoNonblocking PORT WORKER_THREADS [CERT_DIR]\n");
    return 64;
  }
  const int port = std::atoi(argv[1]);
  const int workers = std::atoi(argv[2]);
  // A client that closes while a reply is being written is the client's error, not
  // a reason for the server to die of SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);

  std::shared_ptr<TNonblockingServerSocket> socket;
  if (argc == 4) {
    const std::string dir = argv[3];
    auto tls = std::make_shared<TSSLSocketFactory>(SSLTLS);
    tls->server(true);
    tls->loadCertificate((dir + "/server.pem").c_str());
    tls->loadPrivateKey((dir + "/server.key").c_str());
    tls->loadTrustedCertificates((dir + "/ca.pem").c_str());
    tls->authenticate(true);
    tls->access(std::make_shared<AnyVerifiedClient>());
    socket = std::make_shared<TNonblockingSSLServerSocket>("127.0.0.1", port, tls);
  } else {
    socket = std::make_shared<TNonblockingServerSocket>("127.0.0.1", port);
  }
  auto threads = ThreadManager::newSimpleThreadManager(workers);
  threads->threadFactory(std::make_shared<ThreadFactory>());
  threads->start();
  auto processor = std::make_shared<nimbus_demo::EchoProcessor>(std::make_shared<Handler>());
  TNonblockingServer server(processor, std::make_shared<TBinaryProtocolFactory>(), socket,
                            threads);
  std::printf("listening %d\n", port);
  std::fflush(stdout);
  server.serve();
  return 0;
}
