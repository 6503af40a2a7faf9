// A small demo service served by `nimbus-thrift demo`, used by the tests, the
// interoperability clients and the benchmark (Echo.echo is the benchmark call).

namespace py nimbus_demo
namespace java nimbus.demo
namespace js NimbusDemo
namespace cpp nimbus_demo

exception DemoError {
  1: string message,
  2: i32 code,
}

service Echo {
  // Returns its argument unchanged.
  string echo(1: string s),

  // Binary payloads, unchanged (no UTF-8 decoding on either side).
  binary echo_binary(1: binary data),

  // Does nothing; the smallest round trip.
  void ping(),

  // Fire and forget: the server records the event, no reply is written.
  oneway void notify(1: string event),

  // The events `notify` recorded so far, oldest first.
  list<string> events(),

  // kind = "declared" raises DemoError (a declared exception, sent as a REPLY);
  // anything else raises an exception the IDL does not declare.
  string fail(1: string kind) throws (1: DemoError err),

  // Blocks the worker for `millis` milliseconds, then returns them.
  i32 sleep(1: i32 millis),
}

// A second service, for TMultiplexedProtocol ("Calculator:add") tests.
service Calculator {
  i64 add(1: i64 a, 2: i64 b),
}
