#!/usr/bin/env node
// ACP scenario runner driven by the Go e2e suite.
//
//   node client.mjs --transport stdio --bin /path/to/iac-code --scenario NAME [--cwd DIR] [options]
//   node client.mjs --transport http --http-url http://127.0.0.1:PORT/acp --scenario NAME [options]
//   node client.mjs --transport ws --ws-url ws://127.0.0.1:PORT/acp [--ws-auth header|subprotocol] --scenario NAME [options]
//
// Drives the agent with the real TypeScript client (@agentclientprotocol/sdk 2.x),
// validates every raw message the agent writes against the official JSON Schema
// (schema-check.mjs), and prints exactly ONE JSON line on stdout:
//
//   {"ok":bool,"scenario":...,"transport":...,"result":...,"updates":[...],
//    "permissionRequests":[...],"schema":{"passed":N,"failed":N,"violations":[...]},
//    "sdkErrors":[...],"failures":[...],"error":"...", ...}
//
// Exit code 0 when ok, 1 otherwise. Everything else (harness and SDK logs,
// the agent's stderr) goes to stderr. See README.md.

import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { Readable, Writable } from "node:stream";
import { format, parseArgs } from "node:util";

import * as acp from "@agentclientprotocol/sdk";
import { createHttpStream } from "@agentclientprotocol/sdk/experimental/http-client";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";
import WebSocket from "ws";

import { lineSplitter, makeChecker, sseSplitter } from "./schema-check.mjs";

// ---------------------------------------------------------------------------
// SDK log capture. The SDK reports what it rejected or dropped only through
// console.error / console.warn ("Error handling notification", "Invalid
// message", "Got response to unknown request", SSE payload warnings...).
// Every such call is recorded and makes the run fail. The harness itself
// logs with log() below, never through console.

const sdkErrors = [];
const origConsole = { error: console.error.bind(console), warn: console.warn.bind(console) };
for (const level of ["error", "warn"]) {
  console[level] = (...args) => {
    sdkErrors.push({ level, message: format(...args) });
    origConsole[level]("[acp-sdk]", ...args);
  };
}

function log(...args) {
  process.stderr.write(`[e2e-node] ${format(...args)}\n`);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
// Lets handlers of messages that were already received run to completion. The
// SDK resolves a request's promise synchronously on its response, while the
// notification handlers of earlier messages still have microtasks pending.
const flush = async () => {
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
};

class ScenarioFailure extends Error {}

function errorInfo(err) {
  if (err instanceof acp.RequestError || (err && typeof err.code === "number" && "message" in err)) {
    return { code: err.code, message: err.message, data: err.data };
  }
  return undefined;
}

function describeError(err) {
  if (err === undefined || err === null) return String(err);
  const rpc = errorInfo(err);
  if (rpc) return `JSON-RPC error ${rpc.code}: ${rpc.message}${rpc.data !== undefined ? ` ${JSON.stringify(rpc.data)}` : ""}`;
  return err instanceof Error ? err.message : String(err);
}

// ---------------------------------------------------------------------------
// Permission answers.

const PERMISSION_MODES = [
  "allow_once",
  "allow_always",
  "reject_once",
  "reject_always",
  "cancelled",
  "legacy-allowed",
  "legacy-denied",
  "hold", // never answer until the harness cancels the turn, then answer "cancelled"
];

const CANCELLED_OUTCOME = Object.freeze({ outcome: { outcome: "cancelled" } });

// ---------------------------------------------------------------------------
// Scenarios. Each takes the helper object `h` (see makeHelpers) and returns the
// value reported as "result". Throwing (or h.fail) makes the run fail; h.check
// records a failure and continues. To add a scenario, add an entry here.

export const scenarios = {
  /** initialize only. */
  async initialize(h) {
    return h.initialize();
  },

  /** initialize → session/new → session/prompt(--text). Result: the PromptResponse. */
  async prompt(h) {
    await h.initialize();
    const { sessionId } = await h.newSession();
    return h.prompt(sessionId, h.text(0));
  },

  /**
   * initialize → new → prompt; after the first agent_message_chunk of the
   * turn, send session/cancel; the prompt must resolve with stopReason
   * "cancelled" (never reject). Then prompt "again". Result: {first, second}.
   */
  async cancel(h) {
    await h.initialize();
    const { sessionId } = await h.newSession();
    const from = h.updates.length;
    const turn = h.startPrompt(sessionId, h.text(0));
    await h.waitFor("first agent_message_chunk of the turn", () =>
      h.updateEvents.slice(from).some((e) => e.sessionId === sessionId && e.update.sessionUpdate === "agent_message_chunk"),
      { race: turn },
    );
    await h.cancel(sessionId);
    const first = await h.expectResolve(turn, "cancelled prompt");
    h.check(first.stopReason === "cancelled", `cancelled prompt: stopReason ${JSON.stringify(first.stopReason)}, want "cancelled"`);
    const second = await h.prompt(sessionId, h.opts.text?.[1] ?? "again");
    return { sessionId, first, second };
  },

  /**
   * Like prompt, answering session/request_permission per --permission;
   * --prompts N sends N prompts sequentially in the same session (prompt i
   * uses the i-th --text, or the last one). Result: {sessionId, prompts:[PromptResponse...]}.
   */
  async permission(h) {
    await h.initialize();
    const { sessionId } = await h.newSession();
    const prompts = [];
    for (let i = 0; i < h.opts.prompts; i++) prompts.push(await h.prompt(sessionId, h.text(i)));
    h.check(h.permissionRequests.length > 0, "no session/request_permission was received");
    return { sessionId, prompts };
  },

  /**
   * initialize → new → prompt → session/close → prompt again, which must be
   * rejected with a JSON-RPC error. Result: {sessionId, firstPrompt, closeResponse, rejected:{code,message,data}}.
   */
  async close(h) {
    const init = await h.initialize();
    h.check(
      init?.agentCapabilities?.sessionCapabilities?.close != null,
      "initialize does not advertise agentCapabilities.sessionCapabilities.close, which a client needs before calling session/close",
    );
    const { sessionId } = await h.newSession();
    const firstPrompt = await h.prompt(sessionId, h.text(0));
    const closeResponse = await h.request(acp.methods.agent.session.close, { sessionId });
    const rejected = await h.expectReject(h.prompt(sessionId, h.opts.text?.[1] ?? "after close"), "prompt after session/close");
    return { sessionId, firstPrompt, closeResponse, rejected };
  },

  /** session/cancel on an idle session is a no-op; the next prompt works. Result: the PromptResponse. */
  async "cancel-idle"(h) {
    await h.initialize();
    const { sessionId } = await h.newSession();
    await h.cancel(sessionId);
    await sleep(100);
    return h.prompt(sessionId, h.text(0));
  },

  /**
   * A permission request is left pending; the harness sends session/cancel,
   * answers the pending request "cancelled" (as the spec requires), and the
   * prompt must resolve with stopReason "cancelled". Needs a prompt (--text)
   * that makes the agent ask for permission. Result: {sessionId, first, second}.
   */
  async "cancel-permission"(h) {
    await h.initialize();
    const { sessionId } = await h.newSession();
    h.permissionMode = "hold";
    const turn = h.startPrompt(sessionId, h.text(0));
    await h.waitFor("a session/request_permission", () => h.permissionRequests.some((p) => p.params.sessionId === sessionId), {
      race: turn,
    });
    await h.cancel(sessionId);
    const first = await h.expectResolve(turn, "prompt cancelled during a permission request");
    h.check(first.stopReason === "cancelled", `stopReason ${JSON.stringify(first.stopReason)}, want "cancelled"`);
    h.permissionMode = h.opts.permission;
    const second = await h.prompt(sessionId, h.opts.text?.[1] ?? "again");
    return { sessionId, first, second };
  },

  /**
   * What a client does after the agent restarted: session/list (and its
   * alias sessions/list) for --cwd must show --session-id; session/load must
   * replay the session's history before it answers; then prompt --text in
   * it. Result: {list, aliasList, load, replayed:[update...], prompt} where
   * replayed are the updates of that session that arrived before the load
   * response.
   */
  async load(h) {
    const sessionId = h.opts.sessionId;
    if (!sessionId) h.fail("--session-id is required");
    const init = await h.initialize();
    h.check(init?.agentCapabilities?.loadSession === true, "initialize does not advertise agentCapabilities.loadSession");
    h.check(init?.agentCapabilities?.sessionCapabilities?.list != null, "initialize does not advertise sessionCapabilities.list");
    const list = await h.request(acp.methods.agent.session.list, { cwd: h.cwd });
    const aliasList = await h.request("sessions/list", { cwd: h.cwd });
    h.check(
      list?.sessions?.some((s) => s.sessionId === sessionId),
      `session/list does not show ${sessionId}: ${JSON.stringify(list)}`,
    );
    const from = h.updateEvents.length;
    const load = await h.request(acp.methods.agent.session.load, { sessionId, cwd: h.cwd, mcpServers: [] });
    const replayed = h.updateEvents
      .slice(from)
      .filter((e) => e.sessionId === sessionId)
      .map((e) => e.update);
    h.check(replayed.length > 0, "session/load answered before replaying anything");
    const prompt = await h.prompt(sessionId, h.text(0));
    return { list, aliasList, load, replayed, prompt };
  },

  /**
   * A client that shows questions: initialize advertising
   * `elicitation.form` → new → prompt(--text). Each `elicitation/create` is
   * answered with the next --elicitation-answer (JSON), `{"action":"cancel"}`
   * once they run out. Result: {sessionId, prompt, elicitations:[params…]}.
   */
  async elicitation(h) {
    await h.initialize({ clientCapabilities: { elicitation: { form: {} } } });
    const { sessionId } = await h.newSession();
    const prompt = await h.prompt(sessionId, h.text(0));
    h.check(h.elicitations.length > 0, "no elicitation/create arrived");
    return { sessionId, prompt, elicitations: h.elicitations.map((e) => e.params) };
  },

  /**
   * MCP servers (--mcp-servers) in session/new, with a client that shows
   * notices: initialize → new → prompt(--text). Result: {session, prompt}
   * where session is the NewSessionResponse (its _meta has the servers' state).
   */
  async mcp(h) {
    await h.initialize({ clientCapabilities: { session: { notices: {} } } });
    const session = await h.newSession();
    const prompt = await h.prompt(session.sessionId, h.text(0));
    return { session, prompt };
  },

  /**
   * An editor client: advertises --client-fs / --client-terminal and serves
   * them over --cwd with the --overlay unsaved buffers (see makeEditor).
   * Sends --prompts prompts (the first may be --prompt-json); with
   * --cancel-on-terminal the first prompt is cancelled as soon as a tool call
   * shows a terminal. Result: {sessionId, prompts:[PromptResponse...]}; the
   * report's "editor" has the client requests, buffers and terminals.
   */
  async editor(h) {
    await h.initialize({ clientCapabilities: h.editor.capabilities });
    const { sessionId } = await h.newSession();
    const prompts = [];
    for (let i = 0; i < h.opts.prompts; i++) {
      const text = i === 0 && h.opts.promptJson ? JSON.parse(h.opts.promptJson) : h.text(i);
      if (i === 0 && h.opts.cancelOnTerminal) {
        const from = h.updates.length;
        const turn = h.startPrompt(sessionId, text);
        await h.waitFor("a tool call showing a terminal", () =>
          h.updates.slice(from).some((u) => (u.content ?? []).some((c) => c.type === "terminal")),
          { race: turn },
        );
        await h.cancel(sessionId);
        prompts.push(await h.expectResolve(turn, "prompt cancelled while a terminal runs"));
        continue;
      }
      prompts.push(await h.prompt(sessionId, text));
    }
    return { sessionId, prompts };
  },

  /**
   * A remote client's whole flow on one connection: initialize → new →
   * prompt answering its permission request per --permission → a second
   * prompt (second --text) cancelled at its first chunk → session/close.
   * Result: {sessionId, permitted, cancelled, closeResponse}.
   */
  async flow(h) {
    await h.initialize();
    const { sessionId } = await h.newSession();
    const permitted = await h.prompt(sessionId, h.text(0));
    h.check(h.permissionRequests.length > 0, "no session/request_permission was received");
    const from = h.updateEvents.length;
    const turn = h.startPrompt(sessionId, h.opts.text?.[1] ?? "count slowly");
    await h.waitFor("first agent_message_chunk of the second turn", () =>
      h.updateEvents.slice(from).some((e) => e.sessionId === sessionId && e.update.sessionUpdate === "agent_message_chunk"),
      { race: turn },
    );
    await h.cancel(sessionId);
    const cancelled = await h.expectResolve(turn, "cancelled prompt");
    h.check(cancelled.stopReason === "cancelled", `stopReason ${JSON.stringify(cancelled.stopReason)}, want "cancelled"`);
    const closeResponse = await h.request(acp.methods.agent.session.close, { sessionId });
    return { sessionId, permitted, cancelled, closeResponse };
  },

  /**
   * Two clients on one session: this one (A) and a peer (B) on --peer-url
   * (another pod's endpoint; default --http-url). A creates the session, B
   * loads it. Then: a prompt of A's whose updates both see identically; a
   * permission request (--text 1 makes the agent ask) that both get, B
   * answers and A's is withdrawn ($/cancel_request) at once; prompts of
   * both queued behind a slow one (--text 2), run in order, each shown to
   * both; a hanging prompt (--text 3) with queued ones, all cancelled by
   * B's session/cancel; B's session/close, after which A goes on alone.
   * Result: what the Go spec checks against the fake model's requests.
   */
  async shared(h) {
    await h.initialize();
    const { sessionId } = await h.newSession();
    // B's updates wake h.waitFor too: a wait on B's events (B seeing a
    // turn's end) must not depend on A hearing something after B did.
    const b = await connectPeer(h.opts, h.opts.peerUrl ?? h.opts.httpUrl, () => h._poke());
    try {
      await b.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
      await b.request(acp.methods.agent.session.load, { sessionId, cwd: h.cwd, mcpServers: [] });
      // the load's available_commands_update follows its answer
      for (const deadline = Date.now() + 2000; Date.now() < deadline; await sleep(10)) {
        if (b.updateEvents.some((e) => e.update.sessionUpdate === "available_commands_update")) break;
      }
      const of = (events, from) => events.slice(from).filter((e) => e.sessionId === sessionId).map((e) => e.update);
      const sameStreams = async (what, fromA, fromB) => {
        const deadline = Date.now() + 5000;
        while (of(b.updateEvents, fromB).length < of(h.updateEvents, fromA).length && Date.now() < deadline) await sleep(20);
        await sleep(100); // nothing more on its way to either
        const ua = JSON.stringify(of(h.updateEvents, fromA));
        const ub = JSON.stringify(of(b.updateEvents, fromB));
        h.check(ua === ub, `${what}: the two clients saw different update streams:\nA ${ua}\nB ${ub}`);
        return of(h.updateEvents, fromA);
      };
      const echoed = (updates) =>
        updates.filter((u) => u.sessionUpdate === "user_message_chunk").map((u) => u.content?.text ?? "");

      // 1. identical streams
      let fromA = h.updateEvents.length;
      let fromB = b.updateEvents.length;
      const first = await h.prompt(sessionId, h.text(0));
      const firstUpdates = await sameStreams("first prompt", fromA, fromB);

      // 2. permission: both asked, B answers, A's request is withdrawn
      h.permissionMode = "hold";
      b.permissionMode = "allow_once";
      const asked = h.permissionRequests.length;
      const beforePermissionB = b.updateEvents.length;
      const permission = await h.prompt(sessionId, h.text(1));
      // B (maybe on another pod) has all of that turn once it saw its end
      await h.waitFor("B seeing the permission turn's end", () => of(b.updateEvents, beforePermissionB).some(
        (u) => u.sessionUpdate === "session_info_update" && u._meta && u._meta.activeTurn === null));
      h.check(h.permissionRequests.length === asked + 1, "A was not asked for permission");
      h.check(b.permissionRequests.length === 1, "B was not asked for permission");
      const mine = h.permissionRequests[asked];
      const withdrawnAfterMs = mine?.withdrawnAt && b.permissionRequests[0]?.answeredAt
        ? mine.withdrawnAt - b.permissionRequests[0].answeredAt : null;
      h.check(withdrawnAfterMs !== null && withdrawnAfterMs < 2000,
        `A's permission request was not withdrawn within 2 s of B's answer (${withdrawnAfterMs} ms)`);
      h.permissionMode = h.opts.permission;

      // 3. queued prompts of both, in order, each shown to both
      fromA = h.updateEvents.length;
      fromB = b.updateEvents.length;
      const slow = h.startPrompt(sessionId, h.text(2));
      await h.waitFor("the slow answer's first chunk", () =>
        of(h.updateEvents, fromA).some((u) => u.sessionUpdate === "agent_message_chunk"), { race: slow });
      const queuedB = b.prompt(sessionId, "queued from B");
      await sleep(300); // B's prompt reaches the session first
      const queuedA = h.startPrompt(sessionId, "queued from A");
      const queued = [await slow, await queuedB, await queuedA];
      const queueUpdates = await sameStreams("queued prompts", fromA, fromB);

      // 4. cancel empties the queue
      const hang = h.startPrompt(sessionId, h.text(3));
      const fromHang = h.updateEvents.length;
      await h.waitFor("the hanging answer's first chunk", () =>
        of(h.updateEvents, fromHang).some((u) => u.sessionUpdate === "agent_message_chunk"), { race: hang });
      const waitingB = b.prompt(sessionId, "never runs (B)");
      const waitingA = h.startPrompt(sessionId, "never runs (A)");
      await sleep(300);
      await b.notify(acp.methods.agent.session.cancel, { sessionId });
      const cancelled = [await hang, await waitingB, await waitingA];

      // 5. B closes: A goes on, B hears nothing more
      const closeB = await b.request(acp.methods.agent.session.close, { sessionId });
      const afterCloseB = b.updateEvents.length;
      const alone = await h.prompt(sessionId, h.text(4));
      await sleep(200);
      h.check(of(b.updateEvents, afterCloseB).length === 0, "B got updates after its session/close");
      return {
        sessionId, first, firstUpdates, permission, withdrawnAfterMs,
        queued, queueEchoed: echoed(queueUpdates), cancelled: cancelled.map((r) => r.stopReason),
        closeB, alone, peer: b.report(),
      };
    } finally {
      await b.close();
    }
  },

  /**
   * The key is in .credentials.yml: initialize (the agent must advertise
   * auth.logout) → new → prompt → logout → a prompt and a session/new must
   * be rejected. Result: {first, logout, rejectedPrompt, rejectedNew}.
   */
  async logout(h) {
    const init = await h.initialize();
    h.check(init?.agentCapabilities?.auth?.logout != null, "initialize does not advertise agentCapabilities.auth.logout");
    h.check((init?.authMethods ?? []).length > 0, "authMethods is empty");
    const { sessionId } = await h.newSession();
    const first = await h.prompt(sessionId, h.text(0));
    const logout = await h.request(acp.methods.agent.logout, {});
    const rejectedPrompt = await h.expectReject(h.prompt(sessionId, h.text(0)), "prompt after logout");
    const rejectedNew = await h.expectReject(h.newSession(), "session/new after logout");
    return { first, logout, rejectedPrompt, rejectedNew };
  },

  /**
   * initialize (sessionCapabilities.delete advertised) → new → prompt →
   * session/delete → list must not show it; load and prompt must be
   * rejected; a second delete resolves (the SDK makes -32002 idempotent for
   * delete). Result: {sessionId, deleted, list, rejectedLoad, rejectedPrompt, again}.
   */
  async delete(h) {
    const init = await h.initialize();
    h.check(init?.agentCapabilities?.sessionCapabilities?.delete != null, "initialize does not advertise sessionCapabilities.delete");
    const { sessionId } = await h.newSession();
    await h.prompt(sessionId, h.text(0));
    const deleted = await h.request(acp.methods.agent.session.delete, { sessionId });
    const list = await h.request(acp.methods.agent.session.list, {});
    h.check(!list.sessions.some((s) => s.sessionId === sessionId), `session/list still shows ${sessionId}`);
    const rejectedLoad = await h.expectReject(
      h.request(acp.methods.agent.session.load, { sessionId, cwd: h.cwd, mcpServers: [] }),
      "load after delete",
    );
    const rejectedPrompt = await h.expectReject(h.prompt(sessionId, h.text(0)), "prompt after delete");
    const again = await h.request(acp.methods.agent.session.delete, { sessionId });
    return { sessionId, deleted, list, rejectedLoad, rejectedPrompt, again };
  },

  /** A prompt for a session id that does not exist is rejected; the connection stays usable. */
  async "unknown-session"(h) {
    await h.initialize();
    const rejected = await h.expectReject(h.prompt("no-such-session-e2e", h.text(0)), "prompt for an unknown session");
    const { sessionId } = await h.newSession();
    const after = await h.prompt(sessionId, h.text(0));
    return { rejected, after };
  },
};

// ---------------------------------------------------------------------------
// Argument parsing.

function parseOptions(argv) {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    allowPositionals: false,
    options: {
      transport: { type: "string", default: "stdio" },
      bin: { type: "string" },
      scenario: { type: "string" },
      cwd: { type: "string" },
      "http-url": { type: "string" },
      "ws-url": { type: "string" },
      "ws-auth": { type: "string", default: "header" },
      text: { type: "string", multiple: true },
      permission: { type: "string", default: "allow_once" },
      prompts: { type: "string", default: "1" },
      "session-id": { type: "string" },
      "mcp-servers": { type: "string", default: "[]" },
      "timeout-ms": { type: "string", default: "60000" },
      "eof-grace-ms": { type: "string", default: "1000" },
      "list-scenarios": { type: "boolean", default: false },
      "client-fs": { type: "string", default: "" },
      "client-terminal": { type: "boolean", default: false },
      overlay: { type: "string", default: "{}" },
      "client-fail": { type: "string", multiple: true },
      "prompt-json": { type: "string" },
      "cancel-on-terminal": { type: "boolean", default: false },
      "peer-url": { type: "string" },
      "elicitation-answer": { type: "string", multiple: true },
    },
  });
  const opts = {
    transport: values.transport,
    bin: values.bin,
    scenario: values.scenario,
    cwd: path.resolve(values.cwd ?? process.cwd()),
    httpUrl: values["http-url"],
    wsUrl: values["ws-url"],
    wsAuth: values["ws-auth"],
    text: values.text,
    permission: values.permission,
    prompts: Number(values.prompts),
    sessionId: values["session-id"],
    mcpServers: JSON.parse(values["mcp-servers"]),
    timeoutMs: Number(values["timeout-ms"]),
    eofGraceMs: Number(values["eof-grace-ms"]),
    listScenarios: values["list-scenarios"],
    clientFs: values["client-fs"].split(",").filter(Boolean),
    clientTerminal: values["client-terminal"],
    overlay: JSON.parse(values.overlay),
    clientFail: values["client-fail"] ?? [],
    promptJson: values["prompt-json"],
    cancelOnTerminal: values["cancel-on-terminal"],
    peerUrl: values["peer-url"],
    elicitationAnswers: (values["elicitation-answer"] ?? []).map((a) => JSON.parse(a)),
  };
  if (opts.listScenarios) return opts;
  if (!opts.scenario) throw new Error("--scenario is required");
  if (!Object.hasOwn(scenarios, opts.scenario)) {
    throw new Error(`unknown scenario ${JSON.stringify(opts.scenario)}; known: ${Object.keys(scenarios).join(", ")}`);
  }
  if (opts.transport === "stdio") {
    if (!opts.bin) throw new Error("--bin is required with --transport stdio");
  } else if (opts.transport === "http") {
    if (!opts.httpUrl) throw new Error("--http-url is required with --transport http");
  } else if (opts.transport === "ws") {
    if (!opts.wsUrl) throw new Error("--ws-url is required with --transport ws");
    if (!["header", "subprotocol"].includes(opts.wsAuth)) throw new Error("--ws-auth must be header or subprotocol");
  } else {
    throw new Error(`--transport must be stdio, http or ws, not ${JSON.stringify(opts.transport)}`);
  }
  if (!PERMISSION_MODES.includes(opts.permission)) {
    throw new Error(`--permission must be one of ${PERMISSION_MODES.join(", ")}`);
  }
  for (const [name, v] of [["--prompts", opts.prompts], ["--timeout-ms", opts.timeoutMs], ["--eof-grace-ms", opts.eofGraceMs]]) {
    if (!Number.isInteger(v) || v < 0) throw new Error(`${name} must be a non-negative integer`);
  }
  return opts;
}

// ---------------------------------------------------------------------------
// Transports. Each returns {stream, finish(), info()} where stream is the SDK
// Stream, finish() shuts the transport down after the run (idempotent), and
// info() describes it for the report.

function stdioTransport(opts, checker) {
  log(`spawning ${opts.bin} acp`);
  // Own process group, so that the agent and anything it started can be
  // killed together at the end (kill(-pid)).
  const child = spawn(opts.bin, ["acp"], { stdio: ["pipe", "pipe", "inherit"], env: process.env, detached: true });
  const killGroup = (signal) => {
    try {
      process.kill(-child.pid, signal);
    } catch {
      try {
        child.kill(signal);
      } catch {
        // already gone
      }
    }
  };

  const state = { pid: child.pid, exitCode: null, signal: null, exitedOnEof: false, spawnError: undefined };
  const exited = new Promise((resolve) => {
    child.on("exit", (code, signal) => {
      state.exitCode = code;
      state.signal = signal;
      resolve();
    });
  });
  const spawnFailed = new Promise((_, reject) => {
    child.on("error", (err) => {
      state.spawnError = err.message;
      reject(new Error(`cannot run ${opts.bin}: ${err.message}`));
    });
  });
  spawnFailed.catch(() => {});
  // Writing to a dead child raises EPIPE on stdin; the SDK sees the failed write.
  child.stdin.on("error", (err) => log(`agent stdin: ${err.message}`));

  // Agent stdout: one branch to the SDK, one to the checker.
  const [toSdk, toChecker] = Readable.toWeb(child.stdout).tee();
  const serverLines = lineSplitter((line) => checker.serverLine(line));
  const checkerDone = (async () => {
    const reader = toChecker.getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        serverLines.push(value);
      }
    } catch (err) {
      log(`reading agent stdout: ${err.message}`);
    } finally {
      serverLines.flush();
    }
  })();

  // Client output: tee every complete line to the checker (for id tracking)
  // before it goes to the agent's stdin.
  const clientLines = lineSplitter((line) => checker.clientLine(line));
  const toAgent = new TransformStream({
    transform(chunk, controller) {
      clientLines.push(chunk);
      controller.enqueue(chunk);
    },
  });
  const piped = toAgent.readable.pipeTo(Writable.toWeb(child.stdin)).catch((err) => log(`agent stdin pipe: ${err.message}`));

  let finished;
  return {
    stream: acp.ndJsonStream(toAgent.writable, toSdk),
    failed: spawnFailed,
    finish() {
      finished ??= (async () => {
        // Close the agent's stdin (EOF), give it a moment to exit on its own,
        // then make sure it is gone.
        try {
          await toAgent.writable.close();
          await Promise.race([piped, sleep(500)]);
        } catch {
          child.stdin.end();
        }
        if (state.exitCode === null && state.signal === null && !state.spawnError) {
          await Promise.race([exited, sleep(opts.eofGraceMs)]);
          state.exitedOnEof = state.exitCode !== null || state.signal !== null;
          if (!state.exitedOnEof) {
            killGroup("SIGTERM");
            await Promise.race([exited, sleep(2000)]);
            if (state.exitCode === null && state.signal === null) {
              killGroup("SIGKILL");
              await Promise.race([exited, sleep(2000)]);
            }
          }
        }
        // Whatever the agent left behind in its process group goes too.
        if (child.pid) killGroup("SIGKILL");
        await Promise.race([checkerDone, sleep(2000)]);
      })();
      return finished;
    },
    kill: () => child.pid && killGroup("SIGKILL"),
    info: () => ({ child: { ...state } }),
    describeClose: () =>
      state.exitCode !== null || state.signal !== null
        ? ` (agent process exited: code ${state.exitCode}, signal ${state.signal})`
        : "",
  };
}

// UNTESTED until iac-code serves HTTP: written against http-transport.md §4
// and the SDK 2.4.0 sources.
function httpTransport(opts, checker) {
  const httpErrors = [];
  const readers = new Set();
  const inflight = new Set();

  // Reads one branch of a teed response body into the checker.
  const drain = (body, splitter) => {
    const done = (async () => {
      const reader = body.getReader();
      try {
        for (;;) {
          const { value, done: end } = await reader.read();
          if (end) break;
          splitter.push(value);
        }
      } catch {
        // aborted on close: whatever was read has been checked
      } finally {
        splitter.flush();
      }
    })();
    readers.add(done);
    done.finally(() => readers.delete(done));
  };

  const teeFetch = async (input, init = {}) => {
    const method = (init.method ?? "GET").toUpperCase();
    if (method === "POST" && typeof init.body === "string") checker.clientLine(init.body);
    const call = globalThis.fetch(input, init);
    inflight.add(call);
    call.catch(() => {}).finally(() => inflight.delete(call));
    const response = await call;
    if (!response.ok) {
      httpErrors.push({ method, status: response.status, url: String(input) });
      return response; // HTTP-level error bodies are not JSON-RPC; the SDK reports them
    }
    if (!response.body) return response;
    const type = (response.headers.get("content-type") ?? "").toLowerCase();
    const isSse = type.includes("text/event-stream");
    const isJson = !isSse && method === "POST" && response.status !== 202;
    if (!isSse && !isJson) return response;
    const [mine, theirs] = response.body.tee();
    drain(
      mine,
      isSse
        ? sseSplitter((data) => checker.serverLine(data))
        : (() => {
            // A whole JSON body (the initialize response): one message.
            const chunks = [];
            const decoder = new TextDecoder();
            return {
              push: (c) => chunks.push(decoder.decode(c, { stream: true })),
              flush: () => {
                const text = chunks.join("") + decoder.decode();
                if (text.trim()) checker.serverLine(text);
              },
            };
          })(),
    );
    return new Response(theirs, { status: response.status, statusText: response.statusText, headers: response.headers });
  };

  const token = process.env.IACCODE_ACP_HTTP_TOKEN;
  const stream = createHttpStream(opts.httpUrl, {
    headers: token ? { Authorization: `Bearer ${token}` } : {},
    fetch: teeFetch,
  });
  let finished;
  return {
    stream,
    failed: new Promise(() => {}),
    finish() {
      finished ??= (async () => {
        // The SDK closes the HTTP stream (DELETE) when the connection closes.
        // Wait for outstanding requests, then for the tee readers.
        await flush();
        const deadline = Date.now() + 3000;
        while (inflight.size && Date.now() < deadline) {
          await Promise.race([Promise.allSettled([...inflight]), sleep(100)]);
          await flush();
        }
        await Promise.race([Promise.allSettled([...readers]), sleep(2000)]);
      })();
      return finished;
    },
    kill: () => {},
    info: () => ({ httpErrors }),
    describeClose: () => (httpErrors.length ? ` (HTTP errors: ${JSON.stringify(httpErrors)})` : ""),
  };
}

// The SDK's WebSocket client (experimental/ws-client) on the ws package, whose
// socket tees every text frame to the checker. The token
// (IACCODE_ACP_HTTP_TOKEN), if set, goes in Authorization (--ws-auth header)
// or, as a browser must send it, in a Sec-WebSocket-Protocol entry
// acp.bearer.<token> beside "acp" (--ws-auth subprotocol).
function wsTransport(opts, checker) {
  const token = process.env.IACCODE_ACP_HTTP_TOKEN;
  const headers = {};
  const protocols = ["acp"];
  if (token && opts.wsAuth === "header") headers.Authorization = `Bearer ${token}`;
  if (token && opts.wsAuth === "subprotocol") protocols.push(`acp.bearer.${token}`);
  const state = { status: null, connectionId: null, protocol: null, closeCode: null, closeReason: null, error: null };
  let socket;
  class TeeWebSocket extends WebSocket {
    constructor(url, protocols, options) {
      super(url, protocols, options);
      socket = this;
      this.on("upgrade", (res) => {
        state.status = res.statusCode;
        state.connectionId = res.headers["acp-connection-id"] ?? null;
      });
      this.on("open", () => {
        state.protocol = this.protocol;
      });
      this.on("message", (data, isBinary) => {
        if (!isBinary) checker.serverLine(data.toString());
      });
      this.on("close", (code, reason) => {
        state.closeCode = code;
        state.closeReason = reason.toString();
      });
    }
    send(data, ...rest) {
      checker.clientLine(String(data));
      return super.send(data, ...rest);
    }
  }
  const stream = createWebSocketStream(opts.wsUrl, { WebSocket: TeeWebSocket, headers, protocols });
  const closed = new Promise((resolve) => socket.once("close", resolve));
  const failed = new Promise((_, reject) =>
    socket.once("error", (err) => {
      state.error = err.message;
      reject(new Error(`WebSocket: ${err.message}`));
    }),
  );
  failed.catch(() => {});
  let finished;
  return {
    stream,
    failed,
    finish() {
      finished ??= (async () => {
        if (socket.readyState === WebSocket.OPEN || socket.readyState === WebSocket.CONNECTING) socket.close(1000);
        await Promise.race([closed, sleep(2000)]);
      })();
      return finished;
    },
    kill: () => socket.terminate(),
    info: () => ({ ws: { ...state } }),
    describeClose: () => (state.closeCode !== null ? ` (WebSocket closed: ${state.closeCode} ${state.closeReason})` : ""),
  };
}

// ---------------------------------------------------------------------------
// A second client on its own HTTP connection (the shared scenario): its own
// schema checker and SDK connection, kept open until close(). onEvent runs
// after each of its updates and permission requests is recorded.

async function connectPeer(opts, url, onEvent = () => {}) {
  const checker = makeChecker({
    onViolation: (v) => log(`PEER SCHEMA VIOLATION ${v.def ?? ""} ${v.reason}: ${(v.errors ?? []).join("; ")}\n  ${v.line}`),
  });
  const transport = httpTransport({ ...opts, httpUrl: url }, checker);
  const peer = { updateEvents: [], permissionRequests: [], permissionMode: "allow_once" };
  const app = acp.client({ name: "iac-code-e2e-node-peer" })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      peer.updateEvents.push({ sessionId: params.sessionId, update: params.update });
      onEvent();
    })
    .onRequest(acp.methods.client.session.requestPermission, async ({ params, signal }) => {
      const entry = { params, answer: null };
      peer.permissionRequests.push(entry);
      onEvent();
      const option = (params.options ?? []).find((o) => o.kind === peer.permissionMode);
      if (!option) {
        await new Promise((resolve) => signal?.addEventListener("abort", resolve, { once: true }));
        entry.withdrawnAt = Date.now();
        return CANCELLED_OUTCOME;
      }
      entry.answer = { outcome: { outcome: "selected", optionId: option.optionId } };
      entry.answeredAt = Date.now();
      return entry.answer;
    });
  let release;
  const held = new Promise((resolve) => (release = resolve));
  let ready;
  const connected = new Promise((resolve) => (ready = resolve));
  const run = app.connectWith(transport.stream, async (ctx) => {
    ready(ctx);
    await held;
  });
  run.catch((err) => log(`peer connection: ${describeError(err)}`));
  const ctx = await Promise.race([connected, run.then(() => Promise.reject(new Error("peer connection ended")))]);
  return {

    get updateEvents() { return peer.updateEvents; },
    get permissionRequests() { return peer.permissionRequests; },
    set permissionMode(m) { peer.permissionMode = m; },
    request: async (method, params) => {
      try {
        return await ctx.request(method, params);
      } finally {
        await flush();
      }
    },
    prompt: (sessionId, text) => ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] }),
    notify: (method, params) => ctx.notify(method, params),
    report: () => ({ schema: checker.summary(), unanswered: checker.pendingRequests(), ...transport.info() }),
    async close() {
      release();
      await Promise.race([run.catch(() => {}), sleep(2000)]);
      await transport.finish();
    },
  };
}

// ---------------------------------------------------------------------------
// The editor: fs/* and terminal/* handlers of a client that advertises them.
// Files are the --cwd directory with an in-memory overlay of "unsaved
// buffers" (--overlay, relative path -> content): reads see the overlay
// first, writes go to the overlay only, the disk is never written. Terminals
// run the real command. Every request is recorded in arrival order, and one
// arriving when no prompt of its session is running is a failure (no client
// request of a turn may follow its prompt's answer). --client-fail METHOD
// answers that method with an error.

function makeEditor(opts, record) {
  const read = opts.clientFs.includes("read");
  const write = opts.clientFs.includes("write");
  const capabilities = {};
  if (read || write) capabilities.fs = { readTextFile: read, writeTextFile: write };
  if (opts.clientTerminal) capabilities.terminal = true;
  const buffers = { ...opts.overlay };
  const requests = [];
  const terminals = new Map(); // id -> {child, output, exit, exited, creates, releases, kills, outputs}
  let nextTerminal = 0;

  const rel = (p) => path.relative(opts.cwd, p).split(path.sep).join("/");
  const seen = (method, params) => {
    const active = record.activeTurns.has(params.sessionId);
    requests.push({ method, params, active });
    if (!active) record.failures.push(`${method} arrived after the answer to its session's prompt`);
    if (opts.clientFail.includes(method)) throw new acp.RequestError(-32603, `editor refused ${method}`);
  };
  const absolute = (method, p) => {
    if (!path.isAbsolute(p)) {
      record.failures.push(`${method} with a relative path ${p}`);
      throw acp.RequestError.invalidParams({ path: p }, "path must be absolute");
    }
  };

  const handlers = {
    [acp.methods.client.fs.readTextFile]: ({ params }) => {
      seen("fs/read_text_file", params);
      absolute("fs/read_text_file", params.path);
      let text = buffers[rel(params.path)];
      if (text === undefined) {
        try {
          text = fs.readFileSync(params.path, "utf8");
        } catch {
          throw acp.RequestError.resourceNotFound(params.path);
        }
      }
      if (params.line != null || params.limit != null) {
        const lines = text.split(/(?<=\n)/);
        const from = Math.max((params.line ?? 1) - 1, 0);
        text = lines.slice(from, params.limit != null ? from + params.limit : undefined).join("");
      }
      return { content: text };
    },
    [acp.methods.client.fs.writeTextFile]: ({ params }) => {
      seen("fs/write_text_file", params);
      absolute("fs/write_text_file", params.path);
      buffers[rel(params.path)] = params.content;
      return {};
    },
    [acp.methods.client.terminal.create]: ({ params }) => {
      seen("terminal/create", params);
      const env = { ...process.env };
      for (const { name, value } of params.env ?? []) env[name] = value;
      const child = spawn(params.command, params.args ?? [], { cwd: params.cwd ?? opts.cwd, env, detached: true });
      const id = `term-${++nextTerminal}`;
      const t = { id, child, output: "", truncated: false, exit: null, creates: 1, releases: 0, kills: 0, outputs: 0, waits: 0 };
      const limit = params.outputByteLimit ?? Infinity;
      const append = (chunk) => {
        t.output += chunk.toString("utf8");
        while (Buffer.byteLength(t.output) > limit) {
          t.output = t.output.slice(1);
          t.truncated = true;
        }
      };
      child.stdout.on("data", append);
      child.stderr.on("data", append);
      t.exited = new Promise((resolve) =>
        child.on("exit", (code, signal) => {
          t.exit = { exitCode: code, signal };
          resolve(t.exit);
        }),
      );
      child.on("error", (err) => append(`spawn error: ${err.message}\n`));
      terminals.set(id, t);
      return { terminalId: id };
    },
    [acp.methods.client.terminal.waitForExit]: async ({ params }) => {
      seen("terminal/wait_for_exit", params);
      const t = terminal(params.terminalId);
      t.waits++;
      return t.exited;
    },
    [acp.methods.client.terminal.output]: ({ params }) => {
      seen("terminal/output", params);
      const t = terminal(params.terminalId);
      t.outputs++;
      return { output: t.output, truncated: t.truncated, exitStatus: t.exit };
    },
    [acp.methods.client.terminal.kill]: ({ params }) => {
      seen("terminal/kill", params);
      const t = terminal(params.terminalId);
      t.kills++;
      killGroup(t, "SIGTERM");
      return {};
    },
    [acp.methods.client.terminal.release]: ({ params }) => {
      seen("terminal/release", params);
      const t = terminal(params.terminalId);
      t.releases++;
      if (t.releases > 1) record.failures.push(`terminal ${t.id} released ${t.releases} times`);
      if (!t.exit) killGroup(t, "SIGKILL");
      return {};
    },
  };
  const terminal = (id) => {
    const t = terminals.get(id);
    if (!t) throw acp.RequestError.invalidParams({ terminalId: id }, "unknown terminal");
    return t;
  };
  const killGroup = (t, signal) => {
    try {
      process.kill(-t.child.pid, signal);
    } catch {
      // already gone
    }
  };

  return {
    capabilities,
    buffers,
    register(app) {
      if (read) app.onRequest(acp.methods.client.fs.readTextFile, handlers[acp.methods.client.fs.readTextFile]);
      if (write) app.onRequest(acp.methods.client.fs.writeTextFile, handlers[acp.methods.client.fs.writeTextFile]);
      if (opts.clientTerminal) {
        for (const m of Object.values(acp.methods.client.terminal)) app.onRequest(m, handlers[m]);
      }
    },
    /** Report: requests in order, the buffers, every terminal's counts; leftovers are killed. */
    async finish() {
      const summary = [];
      for (const t of terminals.values()) {
        if (!t.exit) killGroup(t, "SIGKILL");
        const { child, exited, ...rest } = t;
        summary.push(rest);
      }
      return { capabilities, requests, buffers, terminals: summary };
    },
  };
}

// ---------------------------------------------------------------------------
// The helper object handed to scenarios.

function makeHelpers(opts, ctx, record, checker) {
  const waiters = new Set();
  const poke = () => {
    for (const w of waiters) w();
  };
  const cancelled = new Set(); // sessions whose current turn the harness cancelled
  const held = new Map(); // sessionId -> [resolve] of permission answers held until cancel

  const h = {
    acp,
    opts,
    ctx,
    cwd: opts.cwd,
    checker,
    log,
    sleep,
    flush,
    /** update objects in arrival order (as delivered by the SDK) */
    updates: record.updates,
    /** {sessionId, update} in arrival order */
    updateEvents: record.updateEvents,
    /** {turn, params, answer} */
    permissionRequests: record.permissionRequests,
    /** {params, answer} of each elicitation/create (elicitation scenario) */
    elicitations: record.elicitations,
    failures: record.failures,
    /** current answer policy for session/request_permission (see PERMISSION_MODES) */
    permissionMode: opts.permission,
    /** incremented at the start of every prompt sent through h.prompt/h.startPrompt */
    turn: 0,
    initializeResponse: undefined,
    editor: record.editor,

    text(i) {
      const texts = opts.text?.length ? opts.text : ["hello"];
      return texts[Math.min(i, texts.length - 1)];
    },

    /** Records a failed expectation and goes on. */
    check(cond, message) {
      if (!cond) {
        record.failures.push(message);
        log(`CHECK FAILED: ${message}`);
      }
      return Boolean(cond);
    },

    /** Fails the scenario now. */
    fail(message) {
      throw new ScenarioFailure(message);
    },

    async request(method, params, options) {
      try {
        return await ctx.request(method, params, options);
      } finally {
        await flush();
      }
    },

    notify(method, params) {
      return ctx.notify(method, params);
    },

    async initialize(params = {}) {
      h.initializeResponse = await h.request(acp.methods.agent.initialize, {
        protocolVersion: acp.PROTOCOL_VERSION,
        clientCapabilities: {}, // no fs/terminal handlers are registered, so none are advertised
        clientInfo: { name: "iac-code-e2e-node", version: "0.0.0" },
        ...params,
      });
      return h.initializeResponse;
    },

    newSession(params = {}) {
      return h.request(acp.methods.agent.session.new, { cwd: opts.cwd, mcpServers: opts.mcpServers, ...params });
    },

    /** Sends session/prompt and returns the promise without awaiting it. */
    startPrompt(sessionId, text, options) {
      h.turn++;
      cancelled.delete(sessionId);
      const prompt = typeof text === "string" ? [{ type: "text", text }] : text;
      record.activeTurns.add(sessionId);
      const p = ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt }, options);
      // Settled as soon as the answer is read: a client request of this turn
      // handled after that arrived after the answer.
      p.finally(() => record.activeTurns.delete(sessionId)).catch(() => {});
      const settled = p.finally(flush);
      settled.catch(() => {}); // awaited by the caller; avoid unhandled-rejection noise meanwhile
      return settled;
    },

    prompt(sessionId, text, options) {
      return h.startPrompt(sessionId, text, options);
    },

    /**
     * Sends the session/cancel notification, and from now on answers this
     * session's permission requests "cancelled" (pending ones included) until
     * the next prompt starts.
     */
    async cancel(sessionId) {
      cancelled.add(sessionId);
      await ctx.notify(acp.methods.agent.session.cancel, { sessionId });
      for (const release of held.get(sessionId) ?? []) release();
      held.delete(sessionId);
    },

    /** The answer sent for a session/request_permission. */
    async answerPermission(params, signal) {
      if (cancelled.has(params.sessionId)) return CANCELLED_OUTCOME;
      const mode = h.permissionMode;
      if (mode === "hold") {
        // until the harness cancels the turn, or the agent withdraws the request
        await new Promise((resolve) => {
          const list = held.get(params.sessionId) ?? [];
          list.push(resolve);
          held.set(params.sessionId, list);
          signal?.addEventListener("abort", resolve, { once: true });
        });
        return CANCELLED_OUTCOME;
      }
      if (mode === "cancelled") return CANCELLED_OUTCOME;
      if (mode === "legacy-denied") return { outcome: "denied" };
      const options = params.options ?? [];
      if (mode === "legacy-allowed") {
        const allow = options.find((o) => o.kind === "allow_once");
        return { outcome: "allowed", option_id: allow?.optionId ?? "allow_once" };
      }
      const option = options.find((o) => o.kind === mode);
      if (!option) {
        h.check(false, `permission request offers no option of kind ${mode}: ${JSON.stringify(options)}`);
        return CANCELLED_OUTCOME;
      }
      return { outcome: { outcome: "selected", optionId: option.optionId } };
    },

    /**
     * Resolves when cond() becomes true (re-evaluated on every update and
     * permission request). `race`: a promise (e.g. the prompt) whose settling
     * first makes the wait fail.
     */
    waitFor(what, cond, { race } = {}) {
      if (cond()) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const w = () => {
          if (cond()) {
            waiters.delete(w);
            resolve();
          }
        };
        waiters.add(w);
        race?.then(
          (v) => {
            if (!waiters.has(w)) return;
            waiters.delete(w);
            reject(new ScenarioFailure(`prompt finished (${JSON.stringify(v)}) before ${what}`));
          },
          (err) => {
            if (!waiters.has(w)) return;
            waiters.delete(w);
            reject(new ScenarioFailure(`prompt failed (${describeError(err)}) before ${what}`));
          },
        );
      });
    },

    /** Awaits a promise that must resolve; a rejection fails the scenario. */
    async expectResolve(promise, what) {
      try {
        return await promise;
      } catch (err) {
        throw new ScenarioFailure(`${what}: rejected with ${describeError(err)}, expected a result`);
      }
    },

    /** Awaits a promise that must reject with a JSON-RPC error; returns {code, message, data}. */
    async expectReject(promise, what) {
      let value;
      try {
        value = await promise;
      } catch (err) {
        const info = errorInfo(err);
        if (!info) throw new ScenarioFailure(`${what}: failed without a JSON-RPC error: ${describeError(err)}`);
        return info;
      }
      throw new ScenarioFailure(`${what}: resolved with ${JSON.stringify(value)}, expected a JSON-RPC error`);
    },

    _poke: poke,
  };
  return h;
}

// ---------------------------------------------------------------------------
// Main.

function emit(report) {
  const line = `${JSON.stringify(report)}\n`;
  return new Promise((resolve) => process.stdout.write(line, resolve));
}

async function main() {
  const report = {
    ok: false,
    scenario: undefined,
    transport: undefined,
    result: null,
    updates: [],
    permissionRequests: [],
    schema: { passed: 0, failed: 0, violations: [] },
    sdkErrors,
    failures: [],
    error: undefined,
  };

  let opts;
  try {
    opts = parseOptions(process.argv.slice(2));
  } catch (err) {
    report.error = `usage: ${err.message}`;
    await emit(report);
    return 1;
  }
  if (opts.listScenarios) {
    process.stdout.write(`${Object.keys(scenarios).join("\n")}\n`);
    return 0;
  }
  report.scenario = opts.scenario;
  report.transport = opts.transport;

  const checker = makeChecker({
    onViolation: (v) => log(`SCHEMA VIOLATION ${v.def ?? ""} ${v.reason}: ${(v.errors ?? []).join("; ")}\n  ${v.line}`),
  });
  const record = {
    updates: report.updates,
    updateEvents: [],
    permissionRequests: report.permissionRequests,
    failures: report.failures,
    unexpectedRequests: [],
    activeTurns: new Set(),
  };
  record.editor = makeEditor(opts, record);

  const transports = { stdio: stdioTransport, http: httpTransport, ws: wsTransport };
  const transport = transports[opts.transport](opts, checker);

  // If the harness itself is told to stop: take the agent down with it and
  // still report what was seen so far.
  for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"]) {
    process.once(sig, () => {
      transport.kill();
      Object.assign(report, transport.info(), { schema: checker.summary(), error: `harness received ${sig}` });
      process.stdout.write(`${JSON.stringify(report)}\n`, () => process.exit(1));
    });
  }

  let h;
  let connection;
  const app = acp.client({ name: "iac-code-e2e-node" });
  app
    .onConnect((conn) => {
      connection = conn;
    })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      record.updates.push(params.update);
      record.updateEvents.push({ sessionId: params.sessionId, update: params.update });
      h?._poke();
    })
    .onRequest(acp.methods.client.session.requestPermission, async ({ params, signal }) => {
      const entry = { turn: h?.turn ?? 0, params, answer: null };
      record.permissionRequests.push(entry);
      h?._poke();
      const answer = await h.answerPermission(params, signal);
      if (signal?.aborted) entry.withdrawnAt = Date.now(); // the agent sent $/cancel_request
      entry.answer = answer;
      return answer;
    });
  record.editor.register(app);
  record.elicitations = [];
  if (opts.scenario === "elicitation") {
    // Only this scenario advertises elicitation; elsewhere the request is
    // unexpected (the "*" handler below).
    app.onRequest(acp.methods.client.elicitation.create, async ({ params }) => {
      const answer = opts.elicitationAnswers[record.elicitations.length] ?? { action: "cancel" };
      record.elicitations.push({ params, answer });
      h?._poke();
      return answer;
    });
  }
  app.onRequest("*", ({ method }) => {
      // The harness advertises no fs/terminal/elicitation capability.
      record.unexpectedRequests.push(method);
      if (!method.startsWith("_")) record.failures.push(`agent sent request ${method} although the client did not advertise it`);
      throw acp.RequestError.methodNotFound(method);
    });

  let timer;
  const timedOut = new Promise((_, reject) => {
    timer = setTimeout(() => {
      const err = new Error("timeout");
      err.isTimeout = true;
      reject(err);
      connection?.close(err);
    }, opts.timeoutMs);
  });

  let caught;
  try {
    const run = app.connectWith(transport.stream, async (ctx) => {
      h = makeHelpers(opts, ctx, record, checker);
      return scenarios[opts.scenario](h);
    });
    report.result = (await Promise.race([run, timedOut, transport.failed])) ?? null;
  } catch (err) {
    caught = err ?? new Error(String(err));
  } finally {
    clearTimeout(timer);
    connection?.close();
  }

  await flush();
  await transport.finish();

  if (caught?.isTimeout) {
    report.error = "timeout";
  } else if (caught instanceof ScenarioFailure) {
    report.error = caught.message;
  } else if (caught) {
    report.error = `${describeError(caught)}${transport.describeClose()}`;
  }

  Object.assign(report, transport.info());
  report.schema = checker.summary();
  report.unansweredRequests = checker.pendingRequests();
  if (record.unexpectedRequests.length) report.unexpectedRequests = record.unexpectedRequests;
  report.editor = await record.editor.finish();
  if (!report.error && report.failures.length) report.error = report.failures.join("; ");
  if (!report.error && report.schema.failed) report.error = `${report.schema.failed} schema violation(s)`;
  if (!report.error && sdkErrors.length) report.error = `SDK logged ${sdkErrors.length} error(s): ${sdkErrors[0].message}`;
  report.ok = !report.error && report.failures.length === 0 && report.schema.failed === 0 && sdkErrors.length === 0;
  if (report.ok) delete report.error;

  log(`${report.scenario}: ${report.ok ? "ok" : `FAILED: ${report.error}`} (schema ${report.schema.passed} passed, ${report.schema.failed} failed)`);
  await emit(report);
  return report.ok ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  async (err) => {
    log(`harness crashed: ${err?.stack ?? err}`);
    await emit({ ok: false, error: `harness crashed: ${describeError(err)}`, sdkErrors });
    process.exit(1);
  },
);
