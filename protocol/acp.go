package protocol

// This file holds the ACP v1 types the server reads and writes, shaped after
// the official JSON Schema (schema/v1/schema.json of @agentclientprotocol/sdk).

// ProtocolVersion is the only ACP major version this server speaks.
const ProtocolVersion = 1

// Implementation names a client or an agent.
type Implementation struct {
	Name    string `json:"name"`
	Title   string `json:"title,omitempty"`
	Version string `json:"version"`
}

type InitializeRequest struct {
	ProtocolVersion    int                 `json:"protocolVersion"`
	ClientCapabilities *ClientCapabilities `json:"clientCapabilities,omitempty"`
	ClientInfo         *Implementation     `json:"clientInfo,omitempty"`
}

type ClientCapabilities struct {
	FS       *FSCapabilities            `json:"fs,omitempty"`
	Terminal bool                       `json:"terminal,omitempty"`
	Session  *ClientSessionCapabilities `json:"session,omitempty"`
	Auth     *AuthCapabilities          `json:"auth,omitempty"`
	// Elicitation: Form set means the client renders form questions.
	Elicitation *ElicitationCapabilities `json:"elicitation,omitempty"`
	// Meta: older clients (Zed before auth.terminal, the ACP Registry's
	// validator) announce terminal login as _meta["terminal-auth"]: true.
	Meta map[string]RawMessage `json:"_meta,omitempty"`
}

// MetaTerminalAuth is the _meta key of the terminal login convention that
// predates auth.terminal: true in the client's capabilities; on an auth
// method, {command, args, label} of the login to run in a terminal.
const MetaTerminalAuth = "terminal-auth"

// TerminalAuthMeta says whether the client announces terminal login the
// older way, as _meta["terminal-auth"]: true.
func (c *ClientCapabilities) TerminalAuthMeta() bool {
	return c != nil && string(c.Meta[MetaTerminalAuth]) == "true"
}

type ElicitationCapabilities struct {
	Form *Empty `json:"form,omitempty"`
}

// CreateElicitationRequest is elicitation/create in form mode, tied to a
// session and a tool call.
type CreateElicitationRequest struct {
	SessionID       string     `json:"sessionId"`
	ToolCallID      string     `json:"toolCallId,omitempty"`
	Mode            string     `json:"mode"`
	Message         string     `json:"message"`
	RequestedSchema RawMessage `json:"requestedSchema"`
}

// CreateElicitationResponse: Action accept (with Content), decline or cancel.
type CreateElicitationResponse struct {
	Action  string                `json:"action"`
	Content map[string]RawMessage `json:"content,omitempty"`
}

// AuthCapabilities: Terminal means the client can run the agent's
// invocation in an interactive terminal (terminal auth methods).
type AuthCapabilities struct {
	Terminal bool `json:"terminal,omitempty"`
}

// ClientSessionCapabilities: Notices (present and not null) means the
// client shows `notice` session updates.
type ClientSessionCapabilities struct {
	Notices *Empty `json:"notices,omitempty"`
	// Compaction: the client shows compaction_update and
	// compaction_summary_chunk updates.
	Compaction *Empty `json:"compaction,omitempty"`
	// ConfigOptions.Boolean: the client shows boolean config options.
	ConfigOptions *ConfigOptionsCapabilities `json:"configOptions,omitempty"`
}

type ConfigOptionsCapabilities struct {
	Boolean *Empty `json:"boolean,omitempty"`
}

type FSCapabilities struct {
	ReadTextFile  bool `json:"readTextFile,omitempty"`
	WriteTextFile bool `json:"writeTextFile,omitempty"`
}

type InitializeResponse struct {
	ProtocolVersion   int               `json:"protocolVersion"`
	AgentCapabilities AgentCapabilities `json:"agentCapabilities"`
	AgentInfo         Implementation    `json:"agentInfo"`
	AuthMethods       []AuthMethod      `json:"authMethods"`
	Meta              map[string]any    `json:"_meta,omitempty"`
}

type AgentCapabilities struct {
	LoadSession         bool                   `json:"loadSession"`
	PromptCapabilities  PromptCapabilities     `json:"promptCapabilities"`
	McpCapabilities     *McpCapabilities       `json:"mcpCapabilities,omitempty"`
	SessionCapabilities SessionCapabilities    `json:"sessionCapabilities"`
	Auth                *AgentAuthCapabilities `json:"auth,omitempty"`
}

// AgentAuthCapabilities: Logout ({}) advertises the logout method.
type AgentAuthCapabilities struct {
	Logout *Empty `json:"logout,omitempty"`
}

// McpCapabilities are the MCP transports besides stdio the agent connects to.
type McpCapabilities struct {
	HTTP bool `json:"http"`
	SSE  bool `json:"sse"`
}

type PromptCapabilities struct {
	Image           bool `json:"image"`
	Audio           bool `json:"audio"`
	EmbeddedContext bool `json:"embeddedContext"`
}

// Empty is the `{}` marker the schema uses for object-style capabilities.
type Empty struct{}

type SessionCapabilities struct {
	List   *Empty `json:"list,omitempty"`
	Close  *Empty `json:"close,omitempty"`
	Resume *Empty `json:"resume,omitempty"`
	Fork   *Empty `json:"fork,omitempty"`
	Delete *Empty `json:"delete,omitempty"`
	// AdditionalDirectories: new, load and resume take more workspace roots.
	AdditionalDirectories *Empty `json:"additionalDirectories,omitempty"`
}

// AuthMethod is the agent-handled variant (no `type`), or with Type
// AuthTerminal the terminal one: the client runs the agent's invocation
// with Args appended in an interactive terminal (exit 0: success), and
// never passes it to authenticate.
type AuthMethod struct {
	Type        string   `json:"type,omitempty"`
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Args        []string `json:"args,omitempty"`
	// Meta carries the older terminal login (MetaTerminalAuth).
	Meta map[string]any `json:"_meta,omitempty"`
}

// AuthTerminal is the `type` of a terminal auth method.
const AuthTerminal = "terminal"

type AuthenticateRequest struct {
	MethodID string `json:"methodId"`
}

// NewSessionRequest: McpServers is kept raw and read by ParseMcpServers,
// whose errors name the entry.
type NewSessionRequest struct {
	Cwd                   string     `json:"cwd"`
	McpServers            RawMessage `json:"mcpServers,omitempty"`
	AdditionalDirectories []string   `json:"additionalDirectories,omitempty"`
}

type NewSessionResponse struct {
	SessionID     string                `json:"sessionId"`
	Modes         *SessionModeState     `json:"modes,omitempty"`
	Models        *SessionModelState    `json:"models,omitempty"`
	ConfigOptions []SessionConfigOption `json:"configOptions,omitempty"`
	Meta          map[string]any        `json:"_meta,omitempty"`
}

// SessionRef carries the fields shared by load, resume, fork and close.
type SessionRef struct {
	SessionID             string     `json:"sessionId"`
	Cwd                   string     `json:"cwd,omitempty"`
	McpServers            RawMessage `json:"mcpServers,omitempty"`
	AdditionalDirectories []string   `json:"additionalDirectories,omitempty"`
}

// SessionStateResponse answers load and resume.
type SessionStateResponse struct {
	Modes         *SessionModeState     `json:"modes,omitempty"`
	Models        *SessionModelState    `json:"models,omitempty"`
	ConfigOptions []SessionConfigOption `json:"configOptions,omitempty"`
	Meta          map[string]any        `json:"_meta,omitempty"`
}

type SessionModeState struct {
	CurrentModeID  string        `json:"currentModeId"`
	AvailableModes []SessionMode `json:"availableModes"`
}

type SessionMode struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// SessionModelState is the legacy `models` object the specification document
// still names; clients that follow today's schema ignore it.
type SessionModelState struct {
	CurrentModelID  string      `json:"currentModelId"`
	AvailableModels []ModelInfo `json:"availableModels"`
}

type ModelInfo struct {
	ModelID     string `json:"modelId"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

type SessionConfigOption struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Category    string `json:"category,omitempty"`
	Type        string `json:"type"`
	// CurrentValue is a string (select) or a bool (boolean).
	CurrentValue any                  `json:"currentValue"`
	Options      []ConfigSelectOption `json:"options,omitempty"`
}

type ConfigSelectOption struct {
	Value       string `json:"value"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

type SetConfigOptionRequest struct {
	SessionID string `json:"sessionId"`
	ConfigID  string `json:"configId"`
	// Type is "boolean" for a boolean Value, else absent (a value id).
	Type  string     `json:"type,omitempty"`
	Value RawMessage `json:"value"`
}

type SetConfigOptionResponse struct {
	ConfigOptions []SessionConfigOption `json:"configOptions"`
}

type SetModeRequest struct {
	SessionID string `json:"sessionId"`
	ModeID    string `json:"modeId"`
}

// SetModelRequest is the unstable session/set_model (its answer is {}).
type SetModelRequest struct {
	SessionID string `json:"sessionId"`
	ModelID   string `json:"modelId"`
}

type ListSessionsRequest struct {
	Cwd    string `json:"cwd,omitempty"`
	Cursor string `json:"cursor,omitempty"`
}

type ListSessionsResponse struct {
	Sessions   []SessionInfo `json:"sessions"`
	NextCursor string        `json:"nextCursor,omitempty"`
}

type SessionInfo struct {
	SessionID             string   `json:"sessionId"`
	Cwd                   string   `json:"cwd"`
	AdditionalDirectories []string `json:"additionalDirectories,omitempty"`
	Title                 string   `json:"title,omitempty"`
	UpdatedAt             string   `json:"updatedAt,omitempty"`
	Meta                  any      `json:"_meta,omitempty"`
}

type SessionIDParams struct {
	SessionID string `json:"sessionId"`
}

type PromptRequest struct {
	SessionID string         `json:"sessionId"`
	Prompt    []ContentBlock `json:"prompt"`
}

type PromptResponse struct {
	StopReason string `json:"stopReason"`
	Usage      *Usage `json:"usage,omitempty"`
}

// Usage is the (unstable) prompt usage object; the fields the spec document
// names are always present.
type Usage struct {
	InputTokens       int64 `json:"inputTokens"`
	OutputTokens      int64 `json:"outputTokens"`
	TotalTokens       int64 `json:"totalTokens"`
	ThoughtTokens     int64 `json:"thoughtTokens,omitempty"`
	CachedReadTokens  int64 `json:"cachedReadTokens,omitempty"`
	CachedWriteTokens int64 `json:"cachedWriteTokens,omitempty"`
}

// Stop reasons.
const (
	StopEndTurn         = "end_turn"
	StopMaxTokens       = "max_tokens"
	StopMaxTurnRequests = "max_turn_requests"
	StopRefusal         = "refusal"
	StopCancelled       = "cancelled"
)

// ContentBlock is the union of prompt content blocks (discriminator `type`).
// It is decoded from clients; the server writes TextContent for its own text.
type ContentBlock struct {
	Type     string            `json:"type"`
	Text     string            `json:"text,omitempty"`
	Data     string            `json:"data,omitempty"`
	MimeType string            `json:"mimeType,omitempty"`
	URI      string            `json:"uri,omitempty"`
	Name     string            `json:"name,omitempty"`
	Title    string            `json:"title,omitempty"`
	Resource *EmbeddedResource `json:"resource,omitempty"`
}

type EmbeddedResource struct {
	URI      string `json:"uri"`
	Text     string `json:"text,omitempty"`
	Blob     string `json:"blob,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
}

// TextContent is a text content block as the server writes it (text is
// required by the schema, so it is never omitted).
type TextContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// Text builds a text content block.
func Text(s string) TextContent { return TextContent{Type: "text", Text: s} }

// ImageContent is an `image` (Type "image") or `audio` (Type "audio") block
// as the server writes it: base64 data and its MIME type (a replayed user
// image, an MCP result block).
type ImageContent struct {
	Type     string `json:"type"`
	Data     string `json:"data"`
	MimeType string `json:"mimeType"`
	URI      string `json:"uri,omitempty"`
}

// ResourceLink is a `resource_link` block as the server writes it.
type ResourceLink struct {
	Type        string `json:"type"`
	URI         string `json:"uri"`
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	MimeType    string `json:"mimeType,omitempty"`
	Size        *int64 `json:"size,omitempty"`
}

// EmbeddedResourceOut is a `resource` block as the server writes it;
// Resource is a TextResourceContents or a BlobResourceContents.
type EmbeddedResourceOut struct {
	Type     string `json:"type"`
	Resource any    `json:"resource"`
}

type TextResourceContents struct {
	URI      string `json:"uri"`
	Text     string `json:"text"`
	MimeType string `json:"mimeType,omitempty"`
}

type BlobResourceContents struct {
	URI      string `json:"uri"`
	Blob     string `json:"blob"`
	MimeType string `json:"mimeType,omitempty"`
}

// SessionNotification is the params of session/update. Update is one of the
// *Update types below; each carries its own `sessionUpdate` discriminator.
type SessionNotification struct {
	SessionID string `json:"sessionId"`
	Update    any    `json:"update"`
}

// Session update discriminators.
const (
	UpdateUserMessageChunk  = "user_message_chunk"
	UpdateAgentMessageChunk = "agent_message_chunk"
	UpdateAgentThoughtChunk = "agent_thought_chunk"
	UpdateToolCall          = "tool_call"
	UpdateToolCallUpdate    = "tool_call_update"
	UpdateAvailableCommands = "available_commands_update"
	UpdateCurrentMode       = "current_mode_update"
	UpdateConfigOption      = "config_option_update"
	UpdateSessionInfo       = "session_info_update"
	UpdateUsage             = "usage_update"
	UpdateNotice            = "notice"
	UpdatePlan              = "plan"
	UpdateCompaction        = "compaction_update"
	UpdateCompactionSummary = "compaction_summary_chunk"
)

// Compaction statuses.
const (
	CompactionInProgress = "in_progress"
	CompactionCompleted  = "completed"
	CompactionFailed     = "failed"
	CompactionCancelled  = "cancelled"
)

// CompactionUpdate is a compaction_update: the first one with an id places
// the compaction in the timeline, later ones patch its status.
type CompactionUpdate struct {
	SessionUpdate string `json:"sessionUpdate"`
	CompactionID  string `json:"compactionId"`
	Status        string `json:"status"`
	Error         string `json:"error,omitempty"`
}

// CompactionSummaryChunk appends a content block to a compaction's summary.
type CompactionSummaryChunk struct {
	SessionUpdate string `json:"sessionUpdate"`
	CompactionID  string `json:"compactionId"`
	Content       any    `json:"content"`
}

// ChunkUpdate is user_message_chunk, agent_message_chunk or agent_thought_chunk.
// Content is a TextContent or an ImageContent (a replayed user image).
type ChunkUpdate struct {
	SessionUpdate string `json:"sessionUpdate"`
	Content       any    `json:"content"`
	MessageID     string `json:"messageId,omitempty"`
}

// ToolCallUpdate is both `tool_call` (title required) and `tool_call_update`
// (only what changed); pointers and omitempty keep unchanged fields off the wire.
type ToolCallUpdate struct {
	SessionUpdate string `json:"sessionUpdate,omitempty"`
	ToolCallID    string `json:"toolCallId"`
	Title         string `json:"title,omitempty"`
	// Name is the tool's own name (read_file, an MCP tool's name), set on
	// every tool_call; Title is what to show.
	Name      string             `json:"name,omitempty"`
	Kind      string             `json:"kind,omitempty"`
	Status    string             `json:"status,omitempty"`
	Content   []ToolCallContent  `json:"content,omitempty"`
	Locations []ToolCallLocation `json:"locations,omitempty"`
	RawInput  RawMessage         `json:"rawInput,omitempty"`
	RawOutput any                `json:"rawOutput,omitempty"`
	Meta      map[string]any     `json:"_meta,omitempty"`
}

// Tool call statuses.
const (
	ToolPending    = "pending"
	ToolInProgress = "in_progress"
	ToolCompleted  = "completed"
	ToolFailed     = "failed"
)

// ToolCallContent is `content` (a content block), `diff` or `terminal`.
// Content is a *TextContent or another content block as the server writes
// it (ImageContent, AudioContent, ResourceLink, EmbeddedResource).
type ToolCallContent struct {
	Type       string  `json:"type"`
	Content    any     `json:"content,omitempty"`
	Path       string  `json:"path,omitempty"`
	OldText    *string `json:"oldText,omitempty"`
	NewText    *string `json:"newText,omitempty"`
	TerminalID string  `json:"terminalId,omitempty"`
}

type ToolCallLocation struct {
	Path string `json:"path"`
	Line int    `json:"line,omitempty"`
}

type AvailableCommandsUpdate struct {
	SessionUpdate     string             `json:"sessionUpdate"`
	AvailableCommands []AvailableCommand `json:"availableCommands"`
}

type AvailableCommand struct {
	Name        string             `json:"name"`
	Description string             `json:"description"`
	Input       *AvailableCmdInput `json:"input,omitempty"`
}

type AvailableCmdInput struct {
	Hint string `json:"hint"`
}

type CurrentModeUpdate struct {
	SessionUpdate string `json:"sessionUpdate"`
	CurrentModeID string `json:"currentModeId"`
}

type ConfigOptionUpdate struct {
	SessionUpdate string                `json:"sessionUpdate"`
	ConfigOptions []SessionConfigOption `json:"configOptions"`
}

type SessionInfoUpdate struct {
	SessionUpdate string         `json:"sessionUpdate"`
	Title         string         `json:"title,omitempty"`
	UpdatedAt     string         `json:"updatedAt,omitempty"`
	Meta          map[string]any `json:"_meta,omitempty"`
}

// NoticeUpdate is a `notice`: sent only to clients that advertise
// clientCapabilities.session.notices.
type NoticeUpdate struct {
	SessionUpdate string `json:"sessionUpdate"`
	Severity      string `json:"severity"`
	Title         string `json:"title"`
	Description   string `json:"description,omitempty"`
}

// PlanUpdate is the `plan` update: the complete list, which replaces the
// client's copy.
type PlanUpdate struct {
	SessionUpdate string      `json:"sessionUpdate"`
	Entries       []PlanEntry `json:"entries"`
}

// PlanEntry is one task of a plan; Priority is high, medium or low and
// Status pending, in_progress or completed.
type PlanEntry struct {
	Content  string `json:"content"`
	Priority string `json:"priority"`
	Status   string `json:"status"`
}

type UsageUpdate struct {
	SessionUpdate string `json:"sessionUpdate"`
	Used          int64  `json:"used"`
	Size          int64  `json:"size"`
}

// RequestPermissionRequest is the params of session/request_permission.
type RequestPermissionRequest struct {
	SessionID string             `json:"sessionId"`
	ToolCall  ToolCallUpdate     `json:"toolCall"`
	Options   []PermissionOption `json:"options"`
}

type PermissionOption struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
}

// Permission option kinds (also used as option ids).
const (
	AllowOnce    = "allow_once"
	AllowAlways  = "allow_always"
	RejectOnce   = "reject_once"
	RejectAlways = "reject_always"
)

// Client-side methods the agent calls (fs/*, terminal/*), each allowed only
// when the client advertised it in initialize.

type ReadTextFileRequest struct {
	SessionID string `json:"sessionId"`
	Path      string `json:"path"`
	Line      *int   `json:"line,omitempty"`
	Limit     *int   `json:"limit,omitempty"`
}

type ReadTextFileResponse struct {
	Content string `json:"content"`
}

type WriteTextFileRequest struct {
	SessionID string `json:"sessionId"`
	Path      string `json:"path"`
	Content   string `json:"content"`
}

type EnvVariable struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type CreateTerminalRequest struct {
	SessionID       string        `json:"sessionId"`
	Command         string        `json:"command"`
	Args            []string      `json:"args"`
	Env             []EnvVariable `json:"env"`
	Cwd             string        `json:"cwd,omitempty"`
	OutputByteLimit int64         `json:"outputByteLimit,omitempty"`
}

type CreateTerminalResponse struct {
	TerminalID string `json:"terminalId"`
}

// TerminalRequest is the params of terminal/output, wait_for_exit, kill and release.
type TerminalRequest struct {
	SessionID  string `json:"sessionId"`
	TerminalID string `json:"terminalId"`
}

// TerminalExitStatus is the result of terminal/wait_for_exit and the
// exitStatus of terminal/output.
type TerminalExitStatus struct {
	ExitCode *int    `json:"exitCode,omitempty"`
	Signal   *string `json:"signal,omitempty"`
}

type TerminalOutputResponse struct {
	Output     string              `json:"output"`
	Truncated  bool                `json:"truncated"`
	ExitStatus *TerminalExitStatus `json:"exitStatus,omitempty"`
}
