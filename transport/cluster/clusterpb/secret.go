package clusterpb

// IgnoreDeadLetterLogging keeps an Adopt out of protoactor's dead-letter
// log: its mcp_servers hold the client's secrets (MCP env, headers).
func (*Adopt) IgnoreDeadLetterLogging() {}
