#!/usr/bin/env node
// Node.js Thrift client in any transport and protocol, for tests/interop/test_interop_protocols.py.
//
// Usage: node client_protocols.js HOST PORT TRANSPORT PROTOCOL
//   TRANSPORT: buffered | framed        PROTOCOL: binary | compact | header
//
// Runs a short script of calls against the demo server (idl/demo.thrift) and prints ONE JSON
// object of results on stdout; anything unexpected prints {"error": ...} and exits 1.
"use strict";

const path = require("path");

function fatal(message, partial) {
  process.stdout.write(JSON.stringify({ error: message, partial: partial || null }) + "\n");
  process.exit(1);
}

let thrift, Echo, ttypes;
try {
  thrift = require("thrift");
  Echo = require(path.join(__dirname, "gen-nodejs", "Echo"));
  ttypes = require(path.join(__dirname, "gen-nodejs", "demo_types"));
} catch (e) {
  fatal("cannot load npm thrift or the generated code (run scripts/setup.sh): " + e.message);
}

const [host, portText, transportName, protocolName] = process.argv.slice(2);
const transports = { buffered: thrift.TBufferedTransport, framed: thrift.TFramedTransport };
const protocols = { binary: thrift.TBinaryProtocol, compact: thrift.TCompactProtocol,
                    header: thrift.THeaderProtocol };
if (!host || !transports[transportName] || !protocols[protocolName]) {
  fatal("usage: node client_protocols.js HOST PORT buffered|framed binary|compact|header");
}

const results = {};
const timer = setTimeout(() => fatal("timed out after 20000 ms", results), 20000);
const UNICODE = "h\u00e9llo w\u00f6rld \u65e5\u672c\u8a9e \u0416 \ud83d\ude80";

async function main() {
  const conn = await new Promise((resolve, reject) => {
    const c = thrift.createConnection(host, Number(portText), {
      transport: transports[transportName], protocol: protocols[protocolName],
      connect_timeout: 5000,
    });
    c.on("error", (err) => fatal("connection error: " + (err && err.message || err), results));
    c.once("connect", () => resolve(c));
  });
  const echo = thrift.createClient(Echo, conn);
  results.echo = await echo.echo("hello from node");
  results.unicode = await echo.echo(UNICODE);
  results.large_length = (await echo.echo("n".repeat(100 * 1024))).length;
  const allBytes = Buffer.alloc(256);
  for (let i = 0; i < 256; i++) allBytes[i] = i;
  results.binary_hex = Buffer.from(await echo.echo_binary(allBytes)).toString("hex");
  results.ping = (await echo.ping()) === undefined ? null : "unexpected";
  await echo.notify("node-1");
  results.events = await echo.events();
  try {
    await echo.fail("declared");
    results.declared = "no exception";
  } catch (e) {
    results.declared = e instanceof ttypes.DemoError ? { message: e.message, code: e.code }
      : "wrong exception: " + e;
  }
  try {
    await echo.fail("boom");
    results.internal = "no exception";
  } catch (e) {
    results.internal = e instanceof thrift.Thrift.TApplicationException ? e.type
      : "wrong exception: " + e;
  }
  // Several calls in flight on one connection.
  results.pipelined = await Promise.all([1, 2, 3, 4].map((i) => echo.echo("p" + i)));
  results.after = await echo.echo("still alive");
  conn.end();
}

main().then(() => {
  clearTimeout(timer);
  process.stdout.write(JSON.stringify(results) + "\n");
  process.exit(0);
}, (e) => fatal("failed: " + (e && e.stack || e), results));
