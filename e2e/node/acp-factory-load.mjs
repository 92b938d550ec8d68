#!/usr/bin/env node
// acp-factory's "load in a second agent process" flow, driven by the Go e2e
// suite (shared_test.go):
//
//   node acp-factory-load.mjs --bin /path/to/iac-code --cwd DIR
//
// Agent A (one `iac-code acp` process) creates a session and prompts; agent
// B (a second process on the same IAC_CODE_HOME, A still running) loads the
// session with loadSession and prompts; then A prompts again. Prints ONE
// JSON line: {"ok":bool,"sessionId":...,"loadMs":N,"texts":[A's, B's, A's
// answer],"error":...}. Everything else goes to stderr.

import { parseArgs } from "node:util";

import { AgentFactory } from "acp-factory";

const { values } = parseArgs({ options: { bin: { type: "string" }, cwd: { type: "string" } } });

// The answer text of one prompt (its agent_message_chunk updates).
async function answer(session, text) {
  let out = "";
  for await (const u of session.prompt(text)) {
    if (u.sessionUpdate === "agent_message_chunk" && u.content?.type === "text") out += u.content.text;
  }
  return out;
}

const report = { ok: false, texts: [] };
const agents = [];
try {
  AgentFactory.register("iac-code", { command: values.bin, args: ["acp"] });
  const a = await AgentFactory.spawn("iac-code", { permissionMode: "auto-deny" });
  agents.push(a);
  const sa = await a.createSession(values.cwd);
  report.sessionId = sa.id;
  report.texts.push(await answer(sa, "first from A"));

  const b = await AgentFactory.spawn("iac-code", { permissionMode: "auto-deny" });
  agents.push(b);
  const began = Date.now();
  const sb = await b.loadSession(sa.id, values.cwd);
  report.loadMs = Date.now() - began;
  report.texts.push(await answer(sb, "then B"));

  report.texts.push(await answer(sa, "back to A"));
  report.ok = true;
} catch (err) {
  report.error = err?.message ?? String(err);
} finally {
  for (const agent of agents) await agent.close().catch(() => {});
}
process.stdout.write(`${JSON.stringify(report)}\n`, () => process.exit(report.ok ? 0 : 1));
