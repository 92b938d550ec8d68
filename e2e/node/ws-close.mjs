// ws-close.mjs: what the `ws` package (the socket under the TypeScript SDK's
// WebSocket stream in Node) reads when the server closes a WebSocket.
//
//   node ws-close.mjs --ws-url ws://127.0.0.1:PORT/acp --case oversize|wait [--cwd DIR]
//
// Both cases initialize and open a session over raw JSON-RPC text frames
// (every server frame is checked against the ACP schema), then:
//   oversize  sends one text frame of 4 MiB + 64 KiB and keeps the socket
//             open until the server closes it;
//   wait      prints {"ready":true} on stdout and waits for the server to
//             close the socket (the e2e spec then stops the server), sending
//             a notification every 2 ms meanwhile (a client busy writing
//             when the server closes: what it sent is unread on the server).
// The last stdout line is the report:
//   {ok, closeCode, closeReason, socketError, closedAfterMs, schema, error?}
// (closedAfterMs: from the oversized frame's send to the "close" event).
// closeCode is the code `ws` hands its "close" listeners: 1006 when no close
// frame arrived before the TCP connection ended (or was reset).
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import WebSocket from "ws";
import { makeChecker } from "./schema-check.mjs";

const { values } = parseArgs({
  options: {
    "ws-url": { type: "string" },
    case: { type: "string" },
    cwd: { type: "string", default: process.cwd() },
    "timeout-ms": { type: "string", default: "20000" },
  },
});
const report = { ok: false, closeCode: null, closeReason: null, socketError: null, closedAfterMs: null };
let since;
const checker = makeChecker();
const emit = (obj) => new Promise((done) => process.stdout.write(`${JSON.stringify(obj)}\n`, done));

const headers = {};
if (process.env.IACCODE_ACP_HTTP_TOKEN) headers.Authorization = `Bearer ${process.env.IACCODE_ACP_HTTP_TOKEN}`;
const ws = new WebSocket(values["ws-url"], ["acp"], { headers });
const pending = new Map();
let nextId = 1;
ws.on("message", (data, isBinary) => {
  if (isBinary) return;
  const line = data.toString();
  checker.serverLine(line);
  const msg = JSON.parse(line);
  if (msg.id !== undefined && pending.has(msg.id)) {
    pending.get(msg.id)(msg);
    pending.delete(msg.id);
  }
});
ws.on("error", (err) => {
  report.socketError = err.message;
});
const closed = new Promise((done) =>
  ws.once("close", (code, reason) => {
    report.closeCode = code;
    report.closeReason = reason.toString();
    report.closedAfterMs = since === undefined ? null : Date.now() - since;
    done();
  }),
);

function call(method, params) {
  const id = nextId++;
  const line = JSON.stringify({ jsonrpc: "2.0", id, method, params });
  checker.clientLine(line);
  ws.send(line);
  return new Promise((done, fail) => {
    pending.set(id, (msg) => (msg.error ? fail(new Error(`${method}: ${JSON.stringify(msg.error)}`)) : done(msg.result)));
  });
}

async function run() {
  await new Promise((done, fail) => {
    ws.once("open", done);
    ws.once("error", fail);
  });
  await call("initialize", { protocolVersion: 1, clientCapabilities: {}, clientInfo: { name: "ws-close", version: "1.0" } });
  await call("session/new", { cwd: resolve(values.cwd), mcpServers: [] });
  if (values.case === "oversize") {
    since = Date.now();
    // Not through call(): the server must refuse it before decoding, and no
    // answer is expected.
    ws.send(JSON.stringify({ jsonrpc: "2.0", id: 99, method: "session/list", params: { cwd: `/${"x".repeat((4 << 20) + (64 << 10))}` } }));
  } else if (values.case === "wait") {
    const busy = setInterval(() => {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ jsonrpc: "2.0", method: "_ws_close/tick", params: { pad: "x".repeat(256 << 10) } }));
    }, 2);
    closed.then(() => clearInterval(busy));
    await emit({ ready: true });
  } else {
    throw new Error(`--case must be oversize or wait, not ${JSON.stringify(values.case)}`);
  }
  await closed;
}

const timeout = new Promise((_, fail) => setTimeout(() => fail(new Error("timeout")), Number(values["timeout-ms"])).unref());
try {
  await Promise.race([run(), timeout]);
  report.ok = true;
} catch (err) {
  report.error = err.message;
  ws.terminate();
}
report.schema = checker.summary();
if (report.schema.failed) {
  report.ok = false;
  report.error ??= `${report.schema.failed} schema violation(s)`;
}
await emit(report);
process.exit(report.ok ? 0 : 1);
