#!/usr/bin/env node
// Node.js Thrift client over mutual TLS, for tests/interop/test_interop_tls.py.
//
// Usage: node tests/interop/node/client_tls.js HOST PORT CA CERT KEY
//
// Connects with npm thrift's createSSLConnection (framed transport, binary protocol),
// presenting CERT/KEY and checking the server against CA, then calls echo and
// notify("node") and events(), and prints ONE JSON object: {"echo": ..., "events": [...]}.
// A TLS or connection error prints {"error": ...} and exits 1.
"use strict";

const fs = require("fs");
const path = require("path");

function fatal(message) {
  process.stdout.write(JSON.stringify({ error: message }) + "\n");
  process.exit(1);
}

let thrift, Echo;
try {
  thrift = require("thrift");
  Echo = require(path.join(__dirname, "gen-nodejs", "Echo"));
} catch (e) {
  fatal("cannot load npm thrift or the generated code (run scripts/setup.sh): " + e.message);
}

const [host, portText, caFile, certFile, keyFile] = process.argv.slice(2);
const port = Number(portText);
if (!host || !Number.isInteger(port) || !caFile || !certFile || !keyFile) {
  fatal("usage: node client_tls.js HOST PORT CA CERT KEY");
}

setTimeout(() => fatal("timed out after 20 s"), 20000).unref();

const conn = thrift.createSSLConnection(host, port, {
  transport: thrift.TFramedTransport,
  protocol: thrift.TBinaryProtocol,
  ca: [fs.readFileSync(caFile)],
  cert: fs.readFileSync(certFile),
  key: fs.readFileSync(keyFile),
  servername: "localhost",
  rejectUnauthorized: true,
});
conn.on("error", (err) => fatal("connection error: " + err.message));
const client = thrift.createClient(Echo, conn);

(async () => {
  const echoed = await client.echo("over TLS");
  await client.notify("node");
  const events = await client.events();
  process.stdout.write(JSON.stringify({ echo: echoed, events: events }) + "\n");
  conn.end();
  process.exit(0);
})().catch((err) => fatal("call failed: " + (err && err.message ? err.message : String(err))));
