#!/usr/bin/env node
// Runs @modelcontextprotocol/server-everything (the MCP reference server,
// pinned in package-lock.json) over Streamable HTTP on loopback, on a free
// port: the package's own HTTP launcher listens on every interface at a
// fixed port. Prints "listening http://127.0.0.1:PORT/mcp" once it accepts
// connections; SIGTERM ends it.
import http from "node:http";
import { randomUUID } from "node:crypto";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { createServer } from "@modelcontextprotocol/server-everything/dist/server/index.js";

const transports = new Map();

const server = http.createServer(async (req, res) => {
  try {
    if (new URL(req.url, "http://127.0.0.1").pathname !== "/mcp") {
      res.writeHead(404).end();
      return;
    }
    const sid = req.headers["mcp-session-id"];
    let transport = sid ? transports.get(sid) : undefined;
    if (!transport) {
      if (sid || req.method !== "POST") {
        res.writeHead(404, { "content-type": "application/json" }).end(
          JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message: "unknown session" }, id: null }),
        );
        return;
      }
      const { server: mcp, cleanup } = createServer();
      const t = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => transports.set(id, t),
      });
      t.onclose = () => {
        if (t.sessionId) transports.delete(t.sessionId);
        cleanup(t.sessionId);
      };
      await mcp.connect(t);
      transport = t;
    }
    await transport.handleRequest(req, res);
  } catch (err) {
    console.error("mcp-everything-http:", err);
    if (!res.headersSent) res.writeHead(500).end();
  }
});

server.listen(0, "127.0.0.1", () => {
  console.log(`listening http://127.0.0.1:${server.address().port}/mcp`);
});
process.on("SIGTERM", () => process.exit(0));
