#!/usr/bin/env node
// Self-test of the harness (client.mjs + schema-check.mjs) against the fake
// agent in this folder — not a test of iac-code. Runs every scenario over stdio
// and over HTTP (the SDK's reference HTTP server hosting the fake agent), and
// checks that deliberately wrong agent output is caught.
//
//   node testdata/selftest.mjs        (or: npm run selftest)
//
// Ends with the line "N passed, N failed"; exit code 1 if anything failed.

import { spawn } from "node:child_process";
import { once } from "node:events";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const clientPath = path.join(here, "..", "client.mjs");
const fake = path.join(here, "fake-agent.mjs");

function runClient(args, env = {}) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [clientPath, ...args], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, FAKE_AGENT_DELAY_MS: "20", ...env },
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    child.on("close", (code) => {
      const lines = out.trim().split("\n");
      let report;
      try {
        report = JSON.parse(lines[lines.length - 1]);
      } catch {
        report = undefined;
      }
      resolve({ code, report, stdoutLines: lines.length, stderr: err });
    });
  });
}

async function startHttpFake(env = {}) {
  const child = spawn(process.execPath, [fake, "acp", "--transport", "http"], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, FAKE_AGENT_DELAY_MS: "20", ...env },
  });
  let buf = "";
  child.stdout.setEncoding("utf8");
  while (!buf.includes("\n")) {
    const [chunk] = await once(child.stdout, "data");
    buf += chunk;
  }
  return { url: buf.split("\n")[0].trim(), stop: () => child.kill("SIGTERM") };
}

const results = [];
async function runCase(name, args, env, expect) {
  const { code, report, stdoutLines, stderr } = await runClient(args, env);
  const problems = [];
  if (!report) problems.push("no JSON report on stdout");
  else {
    if (stdoutLines !== 1) problems.push(`stdout has ${stdoutLines} lines, want 1`);
    if ((code === 0) !== report.ok) problems.push(`exit code ${code} does not match ok=${report.ok}`);
    try {
      const msg = expect(report);
      if (msg) problems.push(msg);
    } catch (e) {
      problems.push(`expectation threw: ${e.message}`);
    }
  }
  results.push({ name, ok: problems.length === 0 });
  if (problems.length) {
    process.stdout.write(`FAIL ${name}: ${problems.join("; ")}\n`);
    process.stdout.write(`  report: ${JSON.stringify(report)?.slice(0, 2000)}\n  stderr: ${stderr.slice(-2000)}\n`);
  } else {
    process.stdout.write(`ok   ${name}\n`);
  }
}

const passes = (extra) => (r) => {
  if (!r.ok) return `want ok, got error ${JSON.stringify(r.error)}`;
  if (r.schema.failed !== 0) return "schema failures";
  if (r.schema.passed === 0) return "nothing was validated";
  return extra?.(r);
};
const caught = ({ sdk }) => (r) => {
  if (r.ok) return "want ok=false";
  if (r.schema.failed < 1) return "the checker did not flag the bad message";
  if (sdk && r.sdkErrors.length < 1) return "the SDK error log was not captured";
  return undefined;
};
const toolStatuses = (r) => r.updates.filter((u) => u.sessionUpdate === "tool_call_update").map((u) => u.status);

// Over stdio the fake agent inherits the harness's environment; over HTTP a
// case that needs its own fake-agent settings gets its own server.
async function suite(transport, sharedUrl) {
  const base = transport === "stdio" ? ["--transport", "stdio", "--bin", fake] : ["--transport", "http", "--http-url", sharedUrl];
  const t = (name) => `${transport} ${name}`;
  const testCase = async (name, args, env, expect) => {
    if (transport === "stdio" || Object.keys(env).length === 0) return runCase(name, args, env, expect);
    const server = await startHttpFake(env);
    try {
      const i = args.indexOf("--http-url");
      const own = [...args];
      own[i + 1] = server.url;
      return await runCase(name, own, {}, expect);
    } finally {
      server.stop();
    }
  };

  await testCase(t("initialize"), [...base, "--scenario", "initialize"], {}, passes((r) => (r.result?.protocolVersion === 1 ? undefined : "protocolVersion")));
  await testCase(t("prompt"), [...base, "--scenario", "prompt", "--text", "hi"], {}, passes((r) =>
    r.result?.stopReason !== "end_turn" ? "stopReason" : r.updates.length !== 2 ? `want 2 updates, got ${r.updates.length}` : undefined,
  ));
  await testCase(t("cancel"), [...base, "--scenario", "cancel"], { FAKE_AGENT_DELAY_MS: "2000" }, passes((r) =>
    r.result?.first?.stopReason !== "cancelled" || r.result?.second?.stopReason !== "end_turn" ? "stop reasons" : undefined,
  ));
  await testCase(t("close"), [...base, "--scenario", "close"], {}, passes((r) => (r.result?.rejected?.code === -32002 ? undefined : "rejection code")));
  await testCase(t("cancel-idle"), [...base, "--scenario", "cancel-idle"], {}, passes());
  await testCase(t("cancel-permission"), [...base, "--scenario", "cancel-permission", "--text", "write it"], {}, passes((r) =>
    r.result?.first?.stopReason !== "cancelled" || r.permissionRequests[0]?.answer?.outcome?.outcome !== "cancelled" ? "cancelled outcome" : undefined,
  ));
  await testCase(t("unknown-session"), [...base, "--scenario", "unknown-session"], {}, passes((r) => (r.result?.rejected?.code ? undefined : "no rejection")));

  const perm = (mode, status, count) =>
    testCase(t(`permission ${mode}`), [...base, "--scenario", "permission", "--permission", mode, "--prompts", "2", "--text", "please write"], {}, passes((r) => {
      if (r.permissionRequests.length !== count) return `want ${count} permission requests, got ${r.permissionRequests.length}`;
      const st = toolStatuses(r);
      if (st.length !== 2 || st.some((s) => s !== status)) return `tool statuses ${JSON.stringify(st)}, want ${status}`;
      return undefined;
    }));
  await perm("allow_once", "completed", 2);
  await perm("allow_always", "completed", 1);
  await perm("reject_once", "failed", 2);
  await perm("reject_always", "failed", 2);
  await perm("cancelled", "failed", 2);
  await perm("legacy-allowed", "completed", 2);
  await perm("legacy-denied", "failed", 2);

  await testCase(t("timeout"), [...base, "--scenario", "prompt", "--timeout-ms", "300"], { FAKE_AGENT_DELAY_MS: "5000" }, (r) =>
    r.ok || r.error !== "timeout" ? `want error "timeout", got ${JSON.stringify(r.error)}` : undefined,
  );

  // Deliberately wrong agent output. Over HTTP the bad modes are set on the server process.
  const bad = [
    ["tool_call_no_title", true],
    ["mode_modeId", true],
    ["unknown_update", true],
    ["bad_kind", false],
    ["stop_reason", false],
    ["init_result", false],
    ...(transport === "stdio" ? [["non_json", false], ["unknown_id", true]] : []),
  ];
  for (const [mode, sdk] of bad) {
    await testCase(t(`catches ${mode}`), [...base, "--scenario", "prompt"], { FAKE_AGENT_BAD: mode }, caught({ sdk }));
  }
}

// Unit checks of schema-check.mjs pieces the fake agent does not reach.
{
  const { makeChecker, sseSplitter } = await import("../schema-check.mjs");
  const unit = (name, fn) => {
    let problem;
    try {
      problem = fn();
    } catch (e) {
      problem = `threw ${e.message}`;
    }
    results.push({ name, ok: !problem });
    process.stdout.write(problem ? `FAIL ${name}: ${problem}\n` : `ok   ${name}\n`);
  };
  unit("unit sse framing (iac-code style, CRLF split across chunks, multi-line data, comments)", () => {
    const events = [];
    const sse = sseSplitter((d) => events.push(d));
    const enc = new TextEncoder();
    for (const part of ["event: message\r", '\ndata: {"a":1}\r\nid: 1\r\nretry: 5000\r\n\r', '\n: ping\n\ndata: {"b"\ndata: :2}\n\ndata:{"c":3}']) {
      sse.push(enc.encode(part));
    }
    sse.flush();
    const want = ['{"a":1}', '{"b"\n:2}', '{"c":3}'];
    return JSON.stringify(events) === JSON.stringify(want) ? undefined : `got ${JSON.stringify(events)}`;
  });
  unit("unit aliases sessions/list and config/set", () => {
    const c = makeChecker();
    c.clientLine('{"jsonrpc":"2.0","id":1,"method":"sessions/list","params":{}}');
    c.serverLine('{"jsonrpc":"2.0","id":1,"result":{"sessions":[]}}');
    c.clientLine('{"jsonrpc":"2.0","id":2,"method":"config/set","params":{}}');
    c.serverLine('{"jsonrpc":"2.0","id":2,"result":{}}'); // configOptions is required
    const v = c.summary();
    return v.passed === 1 && v.failed === 1 && v.violations[0].def === "SetSessionConfigOptionResponse" ? undefined : JSON.stringify(v);
  });
  unit("unit envelope, error, extension and direction checks", () => {
    const c = makeChecker();
    c.clientLine('{"jsonrpc":"2.0","id":"x","method":"session/load","params":{}}');
    c.serverLine('{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"Invalid params","data":{"session_id":"Session not found"}}}'); // ok
    c.serverLine('{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}'); // ok
    c.serverLine('{"jsonrpc":"2.0","method":"_iac-code/status","params":{"anything":true}}'); // ok
    c.serverLine('{"jsonrpc":"2.0","id":"x","result":{}}'); // already answered
    c.serverLine('{"id":3,"method":"session/request_permission","params":{}}'); // no jsonrpc
    c.serverLine('{"jsonrpc":"2.0","id":4,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}'); // wrong direction
    c.serverLine('[{"jsonrpc":"2.0","method":"session/update"}]'); // batch
    c.serverLine('{"jsonrpc":"2.0","id":5,"error":{"code":"bad","message":"x"}}'); // unknown id
    const v = c.summary();
    return v.passed === 3 && v.failed === 5 ? undefined : JSON.stringify(v);
  });
}

await suite("stdio");
const server = await startHttpFake();
try {
  await suite("http", server.url);
} finally {
  server.stop();
}

await runCase("usage error", ["--scenario", "nope"], {}, (r) => (r.ok || !/usage/.test(r.error) ? "want a usage error" : undefined));
await runCase("missing binary", ["--bin", "/nonexistent/iac-code", "--scenario", "prompt"], {}, (r) =>
  r.ok || !/cannot run/.test(r.error) ? `want a spawn error, got ${JSON.stringify(r.error)}` : undefined,
);

const passed = results.filter((r) => r.ok).length;
const failed = results.length - passed;
process.stdout.write(`${passed} passed, ${failed} failed\n`);
process.exit(failed ? 1 : 0);
