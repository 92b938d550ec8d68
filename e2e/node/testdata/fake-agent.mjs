#!/usr/bin/env node
// A tiny ACP agent used ONLY to check the harness itself (client.mjs and
// schema-check.mjs). It is not what the Go e2e suite tests.
//
// Run as `fake-agent.mjs acp` (the harness spawns `<bin> acp`). Built on the
// SDK's agent side: acp.agent().onRequest(...).connect(ndJsonStream(...)).
// `fake-agent.mjs acp --transport http [--port N]` serves the same agent over
// the SDK's reference Streamable-HTTP server instead (loopback only) and prints
// its URL (http://127.0.0.1:PORT/acp) as the first line on stdout.
//
// Behaviour:
//   initialize            → protocolVersion 1, sessionCapabilities.close
//   session/new           → sessionId "fake-<n>"
//   session/prompt        → agent_message_chunk, pause (FAKE_AGENT_DELAY_MS, default 300,
//                           cut short by session/cancel), then if the text contains "write":
//                           tool_call + session/request_permission (skipped after allow_always)
//                           + tool_call_update completed/failed; agent_message_chunk; end_turn.
//                           After session/cancel: stopReason "cancelled".
//   session/cancel        → cancels the running turn
//   session/close         → cancels, forgets the session; later prompts → -32002
//
// FAKE_AGENT_BAD=<mode>[,<mode>...] makes it emit one deliberately wrong message per prompt:
//   tool_call_no_title   tool_call update without "title"
//   mode_modeId          current_mode_update with "modeId" instead of "currentModeId"
//   unknown_update       sessionUpdate "bogus_variant"
//   bad_kind             tool_call with kind "bogus" (the SDK keeps the update, strips kind)
//   stop_reason          prompt result {"stopReason":"bogus"} (the SDK accepts it)
//   init_result          initialize result without protocolVersion
//   non_json             a non-JSON line on stdout
//   unknown_id           a response to an id the client never used
// FAKE_AGENT_LOG=1 logs every permission answer to stderr.

import http from "node:http";
import { Readable, Writable } from "node:stream";
import { parseArgs } from "node:util";
import * as acp from "@agentclientprotocol/sdk";
import { createNodeHttpHandler } from "@agentclientprotocol/sdk/experimental/node";
import { AcpServer } from "@agentclientprotocol/sdk/experimental/server";

const bad = new Set((process.env.FAKE_AGENT_BAD ?? "").split(",").filter(Boolean));
const delayMs = Number(process.env.FAKE_AGENT_DELAY_MS ?? 300);
const log = (...a) => process.stderr.write(`[fake-agent] ${a.join(" ")}\n`);

const sessions = new Map(); // id -> {abort: AbortController|null, allowAlways: bool}
let nextSession = 1;
let nextTool = 1;

function wait(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    }, { once: true });
  });
}

const text = (t) => ({ type: "text", text: t });

const buildApp = () => acp
  .agent({ name: "fake-agent" })
  .onRequest(acp.methods.agent.initialize, () => {
    const result = {
      protocolVersion: 1,
      agentCapabilities: { loadSession: false, sessionCapabilities: { close: {} } },
      authMethods: [],
      agentInfo: { name: "fake-agent", version: "0.0.0" },
    };
    if (bad.has("init_result")) delete result.protocolVersion;
    return result;
  })
  .onRequest(acp.methods.agent.session.new, () => {
    const sessionId = `fake-${nextSession++}`;
    sessions.set(sessionId, { abort: null, allowAlways: false });
    return { sessionId };
  })
  .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
    sessions.get(params.sessionId)?.abort?.abort();
  })
  .onRequest(acp.methods.agent.session.close, ({ params }) => {
    const s = sessions.get(params.sessionId);
    if (!s) throw acp.RequestError.sessionNotFound(params.sessionId);
    s.abort?.abort();
    sessions.delete(params.sessionId);
    return {};
  })
  .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    const { sessionId } = params;
    const s = sessions.get(sessionId);
    if (!s) throw acp.RequestError.sessionNotFound(sessionId);
    const abort = new AbortController();
    s.abort = abort;
    const update = (u) => client.notify(acp.methods.client.session.update, { sessionId, update: u });
    const words = params.prompt.filter((b) => b.type === "text").map((b) => b.text).join(" ");

    try {
      if (bad.has("non_json")) process.stdout.write("this is not json\n");
      if (bad.has("tool_call_no_title")) await update({ sessionUpdate: "tool_call", toolCallId: "bad-1", kind: "read", status: "pending" });
      if (bad.has("mode_modeId")) await update({ sessionUpdate: "current_mode_update", modeId: "plan" });
      if (bad.has("unknown_update")) await update({ sessionUpdate: "bogus_variant", value: 1 });
      if (bad.has("bad_kind")) await update({ sessionUpdate: "tool_call", toolCallId: "bad-2", title: "Weird", kind: "bogus" });
      if (bad.has("unknown_id")) process.stdout.write(`${JSON.stringify({ jsonrpc: "2.0", id: 987654, result: {} })}\n`);

      await update({ sessionUpdate: "agent_message_chunk", content: text(`Thinking about: ${words}`) });
      await wait(delayMs, abort.signal);
      if (abort.signal.aborted) return { stopReason: "cancelled" };

      if (/write/i.test(words)) {
        const toolCallId = `call-${nextTool++}`;
        await update({ sessionUpdate: "tool_call", toolCallId, title: "Write main.tf", kind: "edit", status: "pending", rawInput: { path: "/tmp/main.tf" } });
        let allowed = s.allowAlways;
        if (!allowed) {
          const answer = await client.request(acp.methods.client.session.requestPermission, {
            sessionId,
            toolCall: { toolCallId, title: "Write main.tf", kind: "edit" },
            options: [
              { optionId: "allow_once", name: "Allow once", kind: "allow_once" },
              { optionId: "allow_always", name: "Always allow", kind: "allow_always" },
              { optionId: "reject_once", name: "Reject", kind: "reject_once" },
              { optionId: "reject_always", name: "Always reject", kind: "reject_always" },
            ],
          });
          if (process.env.FAKE_AGENT_LOG) log(`permission answer ${JSON.stringify(answer)}`);
          const o = answer?.outcome;
          if (o === "allowed") allowed = true; // legacy iac-code answer
          else if (o === "denied") allowed = false; // legacy iac-code answer
          else if (o?.outcome === "selected") {
            allowed = o.optionId.startsWith("allow");
            if (o.optionId === "allow_always") s.allowAlways = true;
          } else if (o?.outcome === "cancelled" || abort.signal.aborted) {
            await update({ sessionUpdate: "tool_call_update", toolCallId, status: "failed" });
            return { stopReason: "cancelled" };
          }
        }
        await update({
          sessionUpdate: "tool_call_update",
          toolCallId,
          status: allowed ? "completed" : "failed",
          content: [{ type: "content", content: text(allowed ? "written" : "Permission denied.") }],
        });
      }
      if (abort.signal.aborted) return { stopReason: "cancelled" };
      await update({ sessionUpdate: "agent_message_chunk", content: text("Done.") });
      return { stopReason: bad.has("stop_reason") ? "bogus" : "end_turn" };
    } finally {
      if (s.abort === abort) s.abort = null;
    }
  });

const { values: args } = parseArgs({
  args: process.argv.slice(2),
  allowPositionals: true,
  options: { transport: { type: "string", default: "stdio" }, port: { type: "string", default: "0" } },
});

if (args.transport === "http") {
  const server = new AcpServer({ createAgent: buildApp });
  const httpServer = http.createServer(createNodeHttpHandler(server));
  httpServer.listen(Number(args.port), "127.0.0.1", () => {
    process.stdout.write(`http://127.0.0.1:${httpServer.address().port}/acp\n`);
  });
  const stop = async () => {
    await server.close();
    httpServer.close();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
} else {
  const conn = buildApp().connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
  conn.closed.then(() => process.exit(0));
}
