// Raw-wire validator for ACP v1 traffic written by the agent (iac-code).
//
// Every line the server writes is validated against the official JSON Schema
// shipped in @agentclientprotocol/sdk (schema/v1/schema.json), per method by
// `$defs` name — never against the root, whose anyOf accepts anything:
//
//   server → client request        params  vs <X>Request        (x-side "client")
//   server → client notification   params  vs <X>Notification   (x-side "client"/"protocol")
//   response to a client request   result  vs <X>Response       (method looked up by the id the client sent)
//   error response                 error   vs Error
//
// Methods starting with "_" (extensions) pass. The iac-code input aliases
// `sessions/list` and `config/set` are mapped to `session/list` and
// `session/set_config_option` so their responses are checked too.
//
// Usage:
//   const checker = makeChecker();
//   checker.clientLine(jsonTextTheClientSent);   // before it reaches the server
//   checker.serverLine(jsonTextTheServerSent);
//   checker.summary()  // {passed, failed, violations:[...]}

import { createRequire } from "node:module";
import Ajv2020 from "ajv/dist/2020.js";

const require = createRequire(import.meta.url);
export const schema = require("@agentclientprotocol/sdk/schema/v1/schema.json");

/** iac-code accepts these method names as aliases of the official ones. */
export const METHOD_ALIASES = Object.freeze({
  "sessions/list": "session/list",
  "config/set": "session/set_config_option",
});

const MAX_LINE_CHARS = 8192; // keep violation records readable
const MAX_ERRORS_PER_VIOLATION = 25;

// The verdict uses exactly these options. A second instance that honours the
// schema's `discriminator` annotations is used only to explain a failure: it
// reports the error of the branch the tag selects instead of every branch's.
const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
ajv.addSchema(schema, "acp");
const explainer = new Ajv2020({ strict: false, allErrors: true, validateFormats: false, discriminator: true });
explainer.addSchema(schema, "acp");

// side -> method -> {Request, Response, Notification} ($defs names)
const defsBySide = { agent: {}, client: {}, protocol: {} };
for (const [name, def] of Object.entries(schema.$defs)) {
  const method = def["x-method"];
  const side = def["x-side"];
  const suffix = ["Request", "Response", "Notification"].find((s) => name.endsWith(s));
  if (!method || !suffix || !defsBySide[side]) continue;
  (defsBySide[side][method] ??= {})[suffix] = name;
}

const validators = new Map();
function validatorFor(defName, instance = ajv) {
  const key = `${instance === ajv ? "v" : "x"}:${defName}`;
  let v = validators.get(key);
  if (!v) {
    if (!schema.$defs[defName]) throw new Error(`schema has no $defs/${defName}`);
    // Compiling a $ref compiles only what the definition reaches; getSchema()
    // on a fragment would compile the whole root schema first.
    v = instance.compile({ $ref: `acp#/$defs/${defName}` });
    validators.set(key, v);
  }
  return v;
}

/** Short, branch-aware explanation of why `value` fails `defName`. */
function explain(defName, value, fallbackErrors) {
  let errors = fallbackErrors;
  try {
    const x = validatorFor(defName, explainer);
    if (!x(value) && x.errors?.length) errors = x.errors;
  } catch {
    // keep the plain validator's errors
  }
  return describeErrors(errors, value);
}

/** Canonical ACP method for a method name the client sent. */
export function canonicalMethod(method) {
  return METHOD_ALIASES[method] ?? method;
}

/** $defs names the checker uses for server-originated messages, for tests/diagnostics. */
export function defsFor(method) {
  return {
    asServerMessage: defsBySide.client[method] ?? defsBySide.protocol[method],
    asClientRequest: defsBySide.agent[canonicalMethod(method)],
  };
}

const idKey = (id) => JSON.stringify(id);
const isValidId = (id) =>
  id === null || typeof id === "string" || (typeof id === "number" && Number.isFinite(id));

function clip(line) {
  return line.length > MAX_LINE_CHARS ? `${line.slice(0, MAX_LINE_CHARS)}…[${line.length} chars]` : line;
}

function pointerGet(root, pointer) {
  let v = root;
  for (const raw of pointer.split("/").slice(1)) {
    const key = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (v === null || typeof v !== "object") return undefined;
    v = v[key];
  }
  return v;
}

function describeErrors(errors, value) {
  errors = errors ?? [];
  // Enumerations are oneOf-of-consts in this schema: fold them into one line.
  const consts = new Map(); // instancePath -> allowed values
  for (const e of errors) {
    if (e.keyword !== "const") continue;
    const list = consts.get(e.instancePath) ?? [];
    list.push(e.params.allowedValue);
    consts.set(e.instancePath, list);
  }
  const out = [];
  const folded = new Set();
  for (const e of errors) {
    const where = e.instancePath || "/";
    if (consts.has(e.instancePath) && (e.keyword === "const" || e.keyword === "oneOf" || e.keyword === "anyOf")) {
      if (folded.has(e.instancePath)) continue;
      folded.add(e.instancePath);
      const got = pointerGet(value, e.instancePath);
      out.push(`${where} must be one of ${JSON.stringify(consts.get(e.instancePath))} (got ${JSON.stringify(got)})`);
      continue;
    }
    const extra =
      e.keyword === "discriminator"
        ? ` (${e.params.tag}=${JSON.stringify(e.params.tagValue)})`
        : e.keyword === "required"
          ? ` (${e.params.missingProperty})`
          : e.keyword === "enum"
            ? ` (${JSON.stringify(e.params.allowedValues)})`
            : "";
    out.push(`${where} ${e.message}${extra}`);
  }
  return out.length > MAX_ERRORS_PER_VIOLATION
    ? [...out.slice(0, MAX_ERRORS_PER_VIOLATION), `… ${out.length - MAX_ERRORS_PER_VIOLATION} more`]
    : out;
}

/**
 * @param {{onViolation?: (v: object) => void}} [options]
 */
export function makeChecker(options = {}) {
  const pending = new Map(); // client request id (JSON key) -> canonical method
  const tally = { passed: 0, failed: 0 };
  const violations = [];
  const stats = { serverLines: 0, clientLines: 0, serverByKind: { request: 0, notification: 0, response: 0, error: 0 } };

  const fail = (line, fields) => {
    tally.failed++;
    const v = { ...fields, line: clip(line) };
    violations.push(v);
    options.onViolation?.(v);
  };

  const check = (defName, value, line, fields) => {
    const validate = validatorFor(defName);
    if (validate(value)) {
      tally.passed++;
      return;
    }
    fail(line, { ...fields, def: defName, reason: "schema", errors: explain(defName, value, validate.errors) });
  };

  function serverMessage(m, line) {
    if (m === null || typeof m !== "object" || Array.isArray(m)) {
      return fail(line, { reason: Array.isArray(m) ? "batch array (not allowed in ACP v1)" : "not a JSON object" });
    }
    if (m.jsonrpc !== "2.0") {
      return fail(line, { reason: 'missing or wrong "jsonrpc":"2.0"', method: m.method, id: m.id });
    }

    if ("method" in m) {
      const { method, id } = m;
      if (typeof method !== "string") return fail(line, { reason: "method is not a string", id });
      const isRequest = "id" in m;
      if (isRequest && !isValidId(id)) return fail(line, { reason: "invalid request id", method, id });
      stats.serverByKind[isRequest ? "request" : "notification"]++;
      if (method.startsWith("_")) {
        tally.passed++;
        return;
      }
      const defs = defsBySide.client[method] ?? defsBySide.protocol[method];
      const defName = isRequest ? defs?.Request : defs?.Notification;
      if (!defName) {
        return fail(line, {
          reason: defsBySide.agent[method]
            ? `"${method}" is a client→agent method; the agent must not send it`
            : `no ${isRequest ? "request" : "notification"} schema for agent→client method "${method}"`,
          method,
          id,
        });
      }
      // JSON-RPC allows omitting params; the schema decides whether {} is acceptable.
      return check(defName, m.params === undefined ? {} : m.params, line, { method, id });
    }

    // A response.
    if (!("id" in m)) return fail(line, { reason: "neither method nor id" });
    const { id } = m;
    if (!isValidId(id)) return fail(line, { reason: "invalid response id", id });
    const hasResult = Object.hasOwn(m, "result");
    const hasError = Object.hasOwn(m, "error");
    if (hasResult === hasError) {
      return fail(line, { reason: "a response needs exactly one of result/error", id });
    }
    const method = id === null ? undefined : pending.get(idKey(id));
    if (hasError) {
      stats.serverByKind.error++;
      if (id !== null) {
        if (method === undefined) return fail(line, { reason: "error response to an id the client never sent (or answered twice)", id });
        pending.delete(idKey(id));
      }
      return check("Error", m.error, line, { id, method, kind: "error" });
    }
    stats.serverByKind.response++;
    if (id === null) return fail(line, { reason: "result response with id null", id });
    if (method === undefined) {
      return fail(line, { reason: "response to an id the client never sent (or answered twice)", id });
    }
    pending.delete(idKey(id));
    if (method.startsWith("_")) {
      tally.passed++;
      return;
    }
    const defName = defsBySide.agent[method]?.Response;
    if (!defName) return fail(line, { reason: `no response schema for client request "${method}"`, id, method });
    return check(defName, m.result, line, { id, method });
  }

  return {
    tally,
    violations,
    stats,
    /** What the client wrote (one JSON-RPC message as text). Tracks request ids. */
    clientLine(line) {
      if (!line.trim()) return;
      stats.clientLines++;
      let m;
      try {
        m = JSON.parse(line);
      } catch {
        return; // not our concern here; the client is the SDK
      }
      if (m && typeof m === "object" && typeof m.method === "string" && "id" in m) {
        pending.set(idKey(m.id), canonicalMethod(m.method));
      }
    },
    /** What the server wrote (one line / one SSE event payload). */
    serverLine(line) {
      if (!line.trim()) return; // blank lines carry nothing; the SDK skips them too
      stats.serverLines++;
      let m;
      try {
        m = JSON.parse(line);
      } catch (e) {
        return fail(line, { reason: `not JSON: ${e.message}` });
      }
      return serverMessage(m, line);
    },
    /** Client request ids still waiting for a response. */
    pendingRequests() {
      return [...pending.entries()].map(([k, method]) => ({ id: JSON.parse(k), method }));
    },
    summary() {
      return { passed: tally.passed, failed: tally.failed, violations: [...violations] };
    },
  };
}

/**
 * Splits a byte stream into lines and hands each complete line to `onLine`.
 * Returns a function to feed chunks and a function to flush the remainder.
 */
export function lineSplitter(onLine) {
  const decoder = new TextDecoder();
  let buf = "";
  return {
    push(chunk) {
      buf += typeof chunk === "string" ? chunk : decoder.decode(chunk, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        onLine(line.endsWith("\r") ? line.slice(0, -1) : line);
      }
    },
    flush() {
      buf += decoder.decode();
      if (buf.length) onLine(buf);
      buf = "";
    },
  };
}

/**
 * Incremental SSE parser mirroring the SDK's: only `data:` lines count
 * (one optional space after the colon is dropped), several data lines are
 * joined with "\n", an empty line ends the event; CRLF, LF and CR all end a
 * line; `event:`, `id:`, `retry:` and `:` comments are ignored.
 */
export function sseSplitter(onEvent) {
  const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
  let buf = "";
  let data = null;
  const dispatch = () => {
    if (data !== null && data.trim()) onEvent(data);
    data = null;
  };
  const consume = (line) => {
    if (line.charCodeAt(0) === 0xfeff) line = line.slice(1);
    if (line === "") return dispatch();
    if (!line.startsWith("data:")) return;
    const value = line.slice(line[5] === " " ? 6 : 5);
    data = data === null ? value : `${data}\n${value}`;
  };
  const drain = (final) => {
    const re = /\r\n|\r|\n/g;
    let start = 0;
    let match;
    while ((match = re.exec(buf))) {
      // A CR at the very end may be the first half of a CRLF split across chunks.
      if (!final && match[0] === "\r" && match.index === buf.length - 1) break;
      consume(buf.slice(start, match.index));
      start = match.index + match[0].length;
    }
    buf = buf.slice(start);
  };
  return {
    push(chunk) {
      buf += decoder.decode(chunk, { stream: true });
      drain(false);
    },
    flush() {
      buf += decoder.decode();
      drain(true);
      if (buf.length) consume(buf);
      buf = "";
      dispatch();
    },
  };
}
