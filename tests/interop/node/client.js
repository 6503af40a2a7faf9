#!/usr/bin/env node
// Node.js Thrift client for the interoperability tests (tests/test_interop_node.py).
//
// Usage: node tests/interop/node/client.js HOST PORT
//
// Runs a fixed script of calls against the nimbus-thrift demo server (idl/demo.thrift) with
// npm `thrift` (framed transport, binary protocol) and prints ONE JSON object of results on
// stdout. Expected outcomes (a declared DemoError, an INTERNAL_ERROR) are recorded as results;
// anything unexpected (a connection error, a timeout, a wrong exception) prints a JSON object
// with an "error" key and exits 1, so the Python test shows what went wrong.
//
// Needs scripts/install_interop.sh: node_modules/ (npm ci) and gen-nodejs/ (thrift --gen js:node).
"use strict";

const path = require("path");

function fatal(message, partial) {
  process.stdout.write(JSON.stringify({ error: message, partial: partial || null }) + "\n");
  process.exit(1);
}

let thrift, Echo, Calculator, ttypes;
try {
  thrift = require("thrift");
  Echo = require(path.join(__dirname, "gen-nodejs", "Echo"));
  Calculator = require(path.join(__dirname, "gen-nodejs", "Calculator"));
  ttypes = require(path.join(__dirname, "gen-nodejs", "demo_types"));
} catch (e) {
  fatal("cannot load npm thrift or the generated code (run scripts/setup.sh): " + e.message);
}

const [host, portText] = process.argv.slice(2);
const port = Number(portText);
if (!host || !Number.isInteger(port) || port <= 0) {
  fatal("usage: node client.js HOST PORT");
}

// The whole script must finish well inside the Python side's subprocess timeout, so a hung
// server shows up as this message (with what was done so far), not as a killed process.
const SCRIPT_TIMEOUT_MS = 20000;
const results = {};
const timer = setTimeout(() => fatal("timed out after " + SCRIPT_TIMEOUT_MS + " ms", results),
                         SCRIPT_TIMEOUT_MS);

// Same literals as tests/test_interop_node.py (kept as escapes so the file is plain ASCII).
const UNICODE = "h\u00e9llo w\u00f6rld \u65e5\u672c\u8a9e \u0416 \ud83d\ude80";

// onError: called with a connection-level error instead of ending the script.
function connect(onError) {
  return new Promise((resolve, reject) => {
    const conn = thrift.createConnection(host, port, {
      transport: thrift.TFramedTransport,
      protocol: thrift.TBinaryProtocol,
      // No max_attempts: npm thrift then never reconnects, so a dropped connection is seen.
      connect_timeout: 5000,
    });
    let connected = false;
    // Errors (a reset, an undecodable reply) and a close we did not ask for end the script:
    // the server must keep connections open, including after an INTERNAL_ERROR reply.
    conn.on("error", (err) => {
      if (onError) onError(err);
      else fatal("connection error: " + (err && err.message || err), results);
    });
    conn.on("close", () => {
      if (!connected) reject(new Error("connection closed before connect"));
      else if (!conn.endedByClient) fatal("the server closed the connection", results);
    });
    conn.once("connect", () => { connected = true; resolve(conn); });
  });
}

function hangUp(conn) {
  conn.endedByClient = true;
  conn.end();
}

// Runs `promise`, which must reject with an instance of `cls`; returns the rejection.
async function expectRejection(promise, cls, what) {
  try {
    const value = await promise;
    throw new Error(what + ": expected " + cls.name + ", got result " + JSON.stringify(value));
  } catch (e) {
    if (!(e instanceof cls)) {
      throw new Error(what + ": expected " + cls.name + ", got " + (e && e.constructor && e.constructor.name) + ": " + (e && e.message));
    }
    return e;
  }
}

async function main() {
  // --- one plain (non-multiplexed) connection: the default service, Echo -------------------
  const conn = await connect();
  const echo = thrift.createClient(Echo, conn);

  results.echo = await echo.echo("hello from node");
  results.unicode = await echo.echo(UNICODE);
  results.empty = await echo.echo("");
  results.large_length = (await echo.echo("n".repeat(256 * 1024))).length;

  const allBytes = Buffer.alloc(256);
  for (let i = 0; i < 256; i++) allBytes[i] = i;
  const binary = await echo.echo_binary(allBytes);
  results.binary_hex = Buffer.from(binary).toString("hex");
  results.binary_is_buffer = Buffer.isBuffer(binary);

  results.ping = (await echo.ping()) === undefined ? null : "unexpected value";

  await echo.notify("node-1");
  await echo.notify("node-2");
  results.events = await echo.events();

  const declared = await expectRejection(echo.fail("declared"), ttypes.DemoError, "fail('declared')");
  results.declared = { message: declared.message, code: declared.code };

  const internal = await expectRejection(echo.fail("boom"), thrift.Thrift.TApplicationException, "fail('boom')");
  results.internal = { type: internal.type, message: internal.message };
  // The same connection (and client) must still work after the INTERNAL_ERROR.
  results.after_internal = await echo.echo("still alive");

  // Many calls in flight at once on ONE connection: the server sees pipelined frames and
  // must answer each with its own seqid (replies may come in any order).
  const started = Date.now();
  const order = [];
  const tagged = (label, p) => p.then((v) => { order.push(label); return v; });
  const inflight = [tagged("sleep300", echo.sleep(300)), tagged("sleep100", echo.sleep(100))];
  for (let i = 0; i < 20; i++) inflight.push(tagged("echo" + i, echo.echo("pipelined-" + i)));
  const values = await Promise.all(inflight);
  results.pipelined = {
    sleeps: values.slice(0, 2),
    echoes: values.slice(2),
    completion_order: order,
    elapsed_ms: Date.now() - started,
  };
  results.after_pipelined = await echo.echo("after pipelined");
  hangUp(conn);

  // --- a second connection, multiplexed (TMultiplexedProtocol "Calculator:add", "Echo:echo")
  const mconn = await connect();
  const mux = new thrift.Multiplexer();
  const calc = mux.createClient("Calculator", Calculator, mconn);
  const mecho = mux.createClient("Echo", Echo, mconn);
  results.add = (await calc.add(40, 2)).toNumber();
  results.add_negative = (await calc.add(-7, 3)).toNumber();
  // Beyond 2**53 (exact i64 on the wire): 0x7ffffffffffffffe + 1 = INT64_MAX.
  results.add_int64_max_hex = (await calc.add(new thrift.Int64("7ffffffffffffffe"), 1)).toOctetString();
  results.mux_echo = await mecho.echo("multiplexed " + UNICODE);
  const mixed = await Promise.all([calc.add(1, 2), mecho.echo("m1"), calc.add(3, 4), mecho.echo("m2")]);
  results.mux_concurrent = [mixed[0].toNumber(), mixed[1], mixed[2].toNumber(), mixed[3]];
  hangUp(mconn);

  // --- an unknown method on a known multiplexed service ("Echo:add") ------------------------
  // The reply must name the bare method ("add"), as Apache's TMultiplexedProcessor does: npm
  // thrift routes a reply to client["recv_" + name], so any other name leaves the call pending
  // and raises a connection error instead. Recorded, not fatal, so the results above survive.
  let connectionError = null;
  const uconn = await connect((err) => { connectionError = err; });
  const wrong = new thrift.Multiplexer().createClient("Echo", Calculator, uconn);
  const outcome = await Promise.race([
    wrong.add(1, 2).then(
      (value) => ({ value: String(value) }),
      (err) => ({ type: err.type, name: err.constructor && err.constructor.name }),
    ),
    new Promise((resolve) => setTimeout(resolve, 1000, { pending_after_ms: 1000 })),
  ]);
  if (connectionError) outcome.connection_error = String(connectionError.message || connectionError);
  results.mux_unknown_method = outcome;
  hangUp(uconn);
}

main().then(
  () => {
    clearTimeout(timer);
    process.stdout.write(JSON.stringify(results) + "\n");
    process.exit(0);
  },
  (err) => fatal(String(err && err.stack || err), results),
);
