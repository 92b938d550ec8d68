-- Durable turns (issue 29): the names of the session's MCP servers as its
-- running turn was recorded. A holder that resumes the turn without them
-- (its previous holder died) waits a moment for a client to bring them.
-- Names only: the servers' configurations carry the client's secrets (env,
-- headers) and are never stored.
ALTER TABLE iac_sessions
    ADD COLUMN turn_mcp_servers text[];
