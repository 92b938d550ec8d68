// Package llmtest is a scripted fake model server for tests, speaking both
// the OpenAI Chat Completions and the Anthropic Messages streaming formats.
// It is a real HTTP server on 127.0.0.1 that streams the same bytes those
// APIs do (data: {chunk}\n\n ... data: [DONE]\n\n for POST …/chat/completions;
// event: message_start … event: message_stop for POST …/messages), so
// providers are tested over their real wire protocol. One queue of replies
// serves both: each model request consumes one Reply, in the format the
// request came in.
//
//	srv := llmtest.Start(t)                      // or NewServer() + Close()
//	srv.Script(llmtest.Reply{Text: "hello"})     // one reply per POST
//	cfg.BaseURL = srv.URL()                      // ends in /v1 (the Anthropic
//	                                             // provider accepts it too)
//	... srv.Requests()[0].Chat.Messages ...      // or .Anthropic.Messages
//
// Other processes script it over HTTP: POST /_script with a JSON array of
// replies (or one reply) appends to the queue, GET /_requests returns the
// recorded requests, POST /_reset clears both.
package llmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gojson "github.com/goccy/go-json"
)

// Server is the fake. It is safe for concurrent use.
type Server struct {
	hs        *httptest.Server
	done      chan struct{}
	closeOnce sync.Once
	seq       atomic.Int64

	mu       sync.Mutex
	queue    []Reply
	def      Reply
	requests []RecordedRequest
}

// Request formats.
const (
	FormatOpenAI    = "openai"
	FormatAnthropic = "anthropic"
)

// RecordedRequest is one request the fake received (control requests excluded).
type RecordedRequest struct {
	Method string          `json:"method"`
	Path   string          `json:"path"`
	Header http.Header     `json:"header"`
	Body   json.RawMessage `json:"body"`
	// Format is FormatOpenAI or FormatAnthropic.
	Format string `json:"format"`
	// Chat is Body decoded (zero when Body is not a chat request).
	Chat ChatRequest `json:"-"`
	// Anthropic is Body decoded (zero when Body is not a Messages request).
	Anthropic AnthropicRequest `json:"-"`
	// decoded is set once Chat or Anthropic holds Body decoded: that is
	// done when Requests hands the record out, not when it is served.
	decoded bool
}

// decode fills Chat or Anthropic from Body, once.
func (r *RecordedRequest) decode() {
	if r.decoded {
		return
	}
	r.decoded = true
	switch r.Format {
	case FormatOpenAI:
		_ = json.Unmarshal(r.Body, &r.Chat)
	case FormatAnthropic:
		_ = json.Unmarshal(r.Body, &r.Anthropic)
	}
}

// requestHead is what serving a model request needs from its body. A
// benchmark's fake serves hundreds of 8 KB requests a second that nobody
// reads back, so the whole body is decoded only when Requests hands it out
// (decode), and the head with go-json, which skips the rest of the body
// ~20x faster than encoding/json (3 µs against 60 µs for 8.5 KB).
type requestHead struct {
	Model         string         `json:"model"`
	Stream        bool           `json:"stream"`
	StreamOptions *StreamOptions `json:"stream_options"`
}

// decodeHead reads the head of a request body; a body that is not valid
// JSON gives the zero head, as its full decode did.
func decodeHead(body []byte) requestHead {
	var h requestHead
	if gojson.Unmarshal(body, &h) != nil {
		return requestHead{}
	}
	return h
}

// JSON decodes Body generically, for assertions on fields Chat lacks.
func (r RecordedRequest) JSON() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(r.Body, &m)
	return m
}

// ChatRequest is the part of a Chat Completions request tests look at.
type ChatRequest struct {
	Model         string         `json:"model"`
	Stream        bool           `json:"stream"`
	StreamOptions *StreamOptions `json:"stream_options"`
	MaxTokens     int            `json:"max_tokens"`
	Messages      []ChatMessage  `json:"messages"`
	Tools         []ChatTool     `json:"tools"`
}

// StreamOptions of a request.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatMessage is one request message.
type ChatMessage struct {
	Role string `json:"role"`
	// Content is a JSON string or an array of content parts; see Text.
	Content          json.RawMessage `json:"content"`
	ReasoningContent string          `json:"reasoning_content"`
	ToolCalls        []ChatToolCall  `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
}

// Text returns the message content as plain text (text parts joined).
func (m ChatMessage) Text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var b strings.Builder
	for _, p := range m.Parts() {
		b.WriteString(p.Text)
	}
	return b.String()
}

// ContentPart is one part of an array content.
type ContentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url,omitempty"`
}

// Parts returns the content parts (a string content as one text part).
func (m ChatMessage) Parts() []ContentPart {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []ContentPart{{Type: "text", Text: s}}
	}
	var parts []ContentPart
	_ = json.Unmarshal(m.Content, &parts)
	return parts
}

// ChatToolCall is a tool call in an assistant request message.
type ChatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// ChatTool is a tool offered to the model.
type ChatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// NewServer starts a fake on 127.0.0.1. Call Close when done.
func NewServer() *Server {
	s := &Server{done: make(chan struct{}), def: Reply{Text: "ok"}}
	s.hs = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	return s
}

// Start is NewServer closed by tb.Cleanup.
func Start(tb testing.TB) *Server {
	s := NewServer()
	tb.Cleanup(s.Close)
	return s
}

// URL is the API base URL, ending in /v1 (POST {URL}/chat/completions,
// POST {URL}/messages).
func (s *Server) URL() string { return s.hs.URL + "/v1" }

// Root is the server URL without /v1, where the /_script, /_requests and
// /_reset control endpoints live.
func (s *Server) Root() string { return s.hs.URL }

// Close unblocks hanging replies and stops the server.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.hs.CloseClientConnections()
		s.hs.Close()
	})
}

// Script appends replies to the queue; each model request consumes one.
func (s *Server) Script(replies ...Reply) {
	s.mu.Lock()
	s.queue = append(s.queue, replies...)
	s.mu.Unlock()
}

// SetDefault sets the reply used when the queue is empty (initially "ok").
func (s *Server) SetDefault(r Reply) {
	s.mu.Lock()
	s.def = r
	s.mu.Unlock()
}

// Pending is the number of scripted replies not consumed yet.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Requests returns a copy of the model requests received so far.
func (s *Server) Requests() []RecordedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.requests {
		s.requests[i].decode()
	}
	return append([]RecordedRequest(nil), s.requests...)
}

// Reset clears the queue and the recorded requests (not the default reply).
func (s *Server) Reset() {
	s.mu.Lock()
	s.queue = nil
	s.requests = nil
	s.mu.Unlock()
}

func (s *Server) next() Reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return s.def
	}
	r := s.queue[0]
	s.queue[0] = Reply{}
	s.queue = s.queue[1:]
	return r
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/_script" && r.Method == http.MethodPost:
		s.handleScript(w, r)
	case r.URL.Path == "/_requests" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Requests())
	case r.URL.Path == "/_reset" && r.Method == http.MethodPost:
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	case strings.HasSuffix(r.URL.Path, "/chat/completions") && r.Method == http.MethodPost:
		s.handleChat(w, r)
	case strings.HasSuffix(r.URL.Path, "/messages") && r.Method == http.MethodPost:
		s.handleMessages(w, r)
	default:
		writeError(w, &Reply{Status: http.StatusNotFound, ErrorMessage: "llmtest: unknown route " + r.Method + " " + r.URL.Path})
	}
}

func (s *Server) handleScript(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var replies []Reply
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '{' {
		replies = make([]Reply, 1)
		err = json.Unmarshal(t, &replies[0])
	} else {
		err = json.Unmarshal(body, &replies)
	}
	if err != nil {
		http.Error(w, "llmtest: bad script: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.Script(replies...)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	rec := RecordedRequest{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Format: FormatOpenAI}
	head := decodeHead(body)
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.mu.Unlock()

	reply := s.next()
	if reply.Status >= 400 {
		writeError(w, &reply)
		return
	}
	if !head.Stream {
		writeError(w, &Reply{Status: http.StatusBadRequest, ErrorMessage: "llmtest: only stream: true is supported"})
		return
	}
	model := head.Model
	if model == "" {
		model = "gpt-4o-mini"
	}
	st := newStreamer(s, w, r, &reply, fmt.Sprintf("chatcmpl-llmtest%d", s.seq.Add(1)), model,
		head.StreamOptions != nil && head.StreamOptions.IncludeUsage)
	st.run()
	st.drain()
}

var defaultErrors = map[int][3]string{
	400: {"Invalid request.", "invalid_request_error", ""},
	401: {"Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.", "invalid_request_error", "invalid_api_key"},
	403: {"You are not allowed to sample from this model.", "invalid_request_error", ""},
	404: {"The model does not exist or you do not have access to it.", "invalid_request_error", "model_not_found"},
	429: {"Rate limit reached for requests. Please try again later.", "requests", "rate_limit_exceeded"},
	500: {"The server had an error while processing your request. Sorry about that!", "server_error", ""},
	503: {"The engine is currently overloaded, please try again later.", "server_error", ""},
}

// writeError answers like OpenAI: {"error":{"message","type","param","code"}}.
func writeError(w http.ResponseWriter, r *Reply) {
	d := defaultErrors[r.Status]
	if d[0] == "" {
		d = [3]string{http.StatusText(r.Status), "server_error", ""}
	}
	msg, typ, code := r.ErrorMessage, r.ErrorType, r.ErrorCode
	if msg == "" {
		msg = d[0]
	}
	if typ == "" {
		typ = d[1]
	}
	if code == "" {
		code = d[2]
	}
	type apiError struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	e := apiError{Message: msg, Type: typ}
	if code != "" {
		e.Code = &code
	}
	body, _ := json.Marshal(map[string]apiError{"error": e})
	for k, v := range r.Header {
		w.Header().Set(k, v)
	}
	if r.RetryAfter != "" {
		w.Header().Set("Retry-After", r.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(r.Status)
	_, _ = w.Write(append(body, '\n'))
}

// pacer writes the chunks of one scripted answer: it sleeps Delay before
// each, counts them, and cuts the stream as scripted (Disconnect, Hang,
// StreamError after AfterChunks chunks).
type pacer struct {
	srv    *Server
	w      http.ResponseWriter
	rc     *http.ResponseController
	req    *http.Request
	reply  *Reply
	flush  bool
	sent   int
	cutAt  int // -1: never
	timer  *time.Timer
	failed bool
	// out gathers unflushed chunks into writes of batchSize, as a server
	// that outruns the network fills its socket buffer: one write system
	// call per batch instead of one per 4 KiB of net/http's buffers.
	out []byte
	// errorEvent is the format's in-stream error for StreamError.
	errorEvent func() []byte
}

func newPacer(srv *Server, w http.ResponseWriter, r *http.Request, reply *Reply) pacer {
	p := pacer{srv: srv, w: w, rc: http.NewResponseController(w), req: r, reply: reply, cutAt: -1}
	if reply.Disconnect || reply.Hang || reply.StreamError != "" {
		p.cutAt = max(reply.AfterChunks, 0)
	}
	p.flush = reply.Chunks == 0 || reply.Delay > 0 || (reply.ChunkFunc != nil && !reply.Buffered)
	return p
}

// writeHeader starts the event stream.
func (p *pacer) writeHeader(requestID string) {
	h := p.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set(requestID, "req_llmtest")
	for k, v := range p.reply.Header {
		h.Set(k, v)
	}
	p.w.WriteHeader(http.StatusOK)
}

// streamer writes one scripted SSE answer in the OpenAI format.
type streamer struct {
	pacer
	head  []byte // `data: {...,"choices":[{"index":0,"delta":`
	tail  []byte // `}],"usage":null}` + "\n\n" after finish_reason
	buf   []byte
	usage bool
}

func newStreamer(srv *Server, w http.ResponseWriter, r *http.Request, reply *Reply, id, model string, usage bool) *streamer {
	st := &streamer{pacer: newPacer(srv, w, r, reply), usage: usage && !reply.NoUsage}
	st.head = fmt.Appendf(nil, `data: {"id":%q,"object":"chat.completion.chunk","created":%d,"model":`, id, time.Now().Unix())
	st.head = appendString(st.head, model)
	st.head = append(st.head, `,"service_tier":"default","system_fingerprint":"fp_llmtest","choices":[{"index":0,"delta":`...)
	st.tail = []byte(`}]`)
	if usage {
		st.tail = append(st.tail, `,"usage":null`...)
	}
	st.tail = append(st.tail, "}\n\n"...)
	st.buf = make([]byte, 0, 512)
	st.errorEvent = func() []byte {
		b := []byte(`data: {"error":{"message":`)
		b = appendString(b, reply.streamErrorMessage())
		b = append(b, `,"type":`...)
		b = appendString(b, reply.StreamError)
		return fmt.Appendf(b, `,"code":%d}}`+"\n\n", reply.streamErrorStatus())
	}
	return st
}

func (st *streamer) run() {
	r := st.reply
	st.writeHeader("X-Request-Id")

	if !st.delta(`{"role":"assistant","content":"","refusal":null}`, "") {
		return
	}
	for _, p := range r.thinkingPieces() {
		if !st.deltaText(`{"content":null,"reasoning_content":`, p) {
			return
		}
	}
	if r.Chunks > 0 {
		text := r.ChunkText
		if text == "" {
			text = "x"
		}
		for i := range r.Chunks {
			if r.ChunkFunc == nil {
				if !st.deltaText(`{"content":`, text) {
					return
				}
				continue
			}
			// Pace first, so a timestamp taken by ChunkFunc excludes Delay.
			if !st.ready() || !st.put(st.textChunk(`{"content":`, r.ChunkFunc(i))) {
				return
			}
		}
	} else {
		for _, p := range r.textPieces() {
			if !st.deltaText(`{"content":`, p) {
				return
			}
		}
	}
	if !st.toolCalls() {
		return
	}
	if r.UsageInChoices && !r.NoUsage {
		if !st.finishWithUsage() {
			return
		}
	} else {
		if !st.delta(`{}`, r.finishReason()) {
			return
		}
		if st.usage && !st.usageChunk() {
			return
		}
	}
	if st.cutAt >= 0 {
		st.cut()
		return
	}
	st.drain()
	_, _ = st.w.Write([]byte("data: [DONE]\n\n"))
	_ = st.rc.Flush()
}

func (st *streamer) toolCalls() bool {
	r := st.reply
	if len(r.ToolCalls) == 0 {
		return true
	}
	pieces := make([][]string, len(r.ToolCalls))
	for i := range r.ToolCalls {
		pieces[i] = r.argPieces(&r.ToolCalls[i])
	}
	// The first fragment of each call carries id and name (arguments "").
	first := func(i int) bool {
		tc := &r.ToolCalls[i]
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("call_llmtest_%d", i)
		}
		b := fmt.Appendf(nil, `{"tool_calls":[{"index":%d,"id":`, i)
		b = appendString(b, id)
		b = append(b, `,"type":"function","function":{"name":`...)
		b = appendString(b, tc.Name)
		b = append(b, `,"arguments":""}}]}`...)
		return st.delta(string(b), "")
	}
	frag := func(i int, p string) bool {
		b := fmt.Appendf(nil, `{"tool_calls":[{"index":%d,"function":{"arguments":`, i)
		b = appendString(b, p)
		b = append(b, `}}]}`...)
		return st.delta(string(b), "")
	}
	if !r.Interleave {
		for i := range r.ToolCalls {
			if !first(i) {
				return false
			}
			for _, p := range pieces[i] {
				if !frag(i, p) {
					return false
				}
			}
		}
		return true
	}
	for i := range r.ToolCalls {
		if !first(i) {
			return false
		}
	}
	for j := 0; ; j++ {
		more := false
		for i := range pieces {
			if j < len(pieces[i]) {
				more = true
				if !frag(i, pieces[i][j]) {
					return false
				}
			}
		}
		if !more {
			return true
		}
	}
}

func (st *streamer) usageChunk() bool {
	b := st.head[:bytes.LastIndex(st.head, []byte(`[{"index"`))]
	b = append(append([]byte(nil), b...), "[]"...)
	b = appendOpenAIUsage(b, st.reply.usage())
	b = append(b, "}\n\n"...)
	return st.ready() && st.put(b)
}

// finishWithUsage sends the finish chunk carrying the usage, as servers do
// that ignore stream_options.include_usage.
func (st *streamer) finishWithUsage() bool {
	if !st.ready() {
		return false
	}
	b := append([]byte(nil), st.head...)
	b = append(b, `{},"logprobs":null,"finish_reason":`...)
	b = appendString(b, st.reply.finishReason())
	b = append(b, "}]"...)
	b = appendOpenAIUsage(b, st.reply.usage())
	b = append(b, "}\n\n"...)
	return st.put(b)
}

func appendOpenAIUsage(b []byte, u *Usage) []byte {
	return fmt.Appendf(b, `,"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,`+
		`"prompt_tokens_details":{"cached_tokens":%d,"audio_tokens":0},`+
		`"completion_tokens_details":{"reasoning_tokens":%d,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`,
		u.PromptTokens, u.CompletionTokens, u.PromptTokens+u.CompletionTokens, u.CachedTokens, u.ReasoningTokens)
}

// delta sends one choice chunk with a preformatted delta object.
func (st *streamer) delta(delta, finish string) bool {
	if !st.ready() {
		return false
	}
	b := append(st.buf[:0], st.head...)
	b = append(b, delta...)
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	if finish == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, finish)
	}
	b = append(b, st.tail...)
	st.buf = b
	return st.put(b)
}

// deltaText sends a {prefix"text"} delta without allocating.
func (st *streamer) deltaText(prefix, text string) bool {
	return st.ready() && st.put(st.textChunk(prefix, text))
}

func (st *streamer) textChunk(prefix, text string) []byte {
	b := append(st.buf[:0], st.head...)
	b = append(b, prefix...)
	b = appendString(b, text)
	b = append(b, `},"logprobs":null,"finish_reason":null`...)
	b = append(b, st.tail...)
	st.buf = b
	return b
}

// ready cuts the stream when scripted to, and sleeps Delay before a chunk.
func (st *pacer) ready() bool {
	if st.failed {
		return false
	}
	if st.cutAt >= 0 && st.sent >= st.cutAt {
		st.cut()
		return false
	}
	d := st.reply.Delay
	if d <= 0 {
		return true
	}
	if st.timer == nil {
		st.timer = time.NewTimer(d)
	} else {
		st.timer.Reset(d)
	}
	select {
	case <-st.timer.C:
		return true
	case <-st.req.Context().Done():
	case <-st.srv.done:
	}
	st.failed = true
	return false
}

// put writes a counted chunk.
func (st *pacer) put(b []byte) bool {
	if !st.write(b) {
		return false
	}
	st.sent++
	return true
}

// batchSize is the size of the writes of unflushed chunks.
const batchSize = 64 << 10

// write writes without counting (structural events of the Anthropic format).
func (st *pacer) write(b []byte) bool {
	if st.failed {
		return false
	}
	if !st.flush {
		st.out = append(st.out, b...)
		if len(st.out) < batchSize {
			return true
		}
		b = st.out
		st.out = st.out[:0]
	}
	if _, err := st.w.Write(b); err != nil {
		st.failed = true
		return false
	}
	if st.flush {
		if err := st.rc.Flush(); err != nil {
			st.failed = true
			return false
		}
	}
	return true
}

// drain writes the chunks write gathered.
func (st *pacer) drain() {
	if len(st.out) == 0 || st.failed {
		return
	}
	if _, err := st.w.Write(st.out); err != nil {
		st.failed = true
	}
	st.out = st.out[:0]
}

// cut ends the stream abnormally: an error event, a dropped connection or a
// hang.
func (st *pacer) cut() {
	st.drain()
	st.failed = true
	if st.reply.StreamError != "" && st.errorEvent != nil {
		_, _ = st.w.Write(st.errorEvent())
		_ = st.rc.Flush()
		return
	}
	_ = st.rc.Flush()
	if st.reply.Hang {
		select {
		case <-st.req.Context().Done():
		case <-st.srv.done:
		}
		return
	}
	conn, _, err := st.rc.Hijack()
	if err != nil {
		// HTTP/2 cannot hijack; aborting resets the stream instead.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
