// Package store persists sessions: one directory per session under
// <root>/sessions/<id>/ holding an append-only JSONL history
// (history.jsonl) and an atomically replaced metadata file (meta.json).
//
// history.jsonl has one Entry per line, {"seq","time","kind","message"[,
// "upTo"]}, with seq strictly increasing along the file. Lines that do not
// decode (a partial last line after kill -9, a corrupt line anywhere) are
// skipped with a warning on read; Open also cuts an unterminated last line
// (or terminates it when it was a whole entry) so later appends start on a
// fresh line. Appends are plain write(2)s, fsynced by Session.Sync (call it
// at every turn end) and by Close. meta.json, the history when rewritten,
// and whole new session directories (Create, Fork) are written to a
// temporary name, fsynced, renamed into place, and the directory fsynced.
//
// A Store is safe for concurrent use. A Session handle belongs to exactly one
// owner (the session actor), which performs all writes of that session; a
// second Open of the same id in the same process fails with ErrInUse.
//
// Across processes (two servers on one IAC_CODE_HOME, or two Store values on
// one root) a session has one writer at a time: a handle holds an exclusive
// flock(2) on <id>/lock from Open/Create/Fork until Release or Close, and an
// Open, Acquire or Delete elsewhere meanwhile fails with an *InUseError
// naming the holder's pid. A released handle holds no file descriptor;
// Acquire takes the lock again and reloads the session when another writer
// changed it meanwhile, so lines never interleave.
//
// That is the file store (FileStore), for the processes of one machine.
// PGStore keeps the same sessions in PostgreSQL for several processes (the
// pods of a cluster), with a lease per held session instead of the lock;
// Open picks one by URL (IAC_CODE_STORE_URL). Both pass one contract test
// suite.
package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

// Errors of the store. Returned errors wrap them; test with errors.Is.
var (
	// ErrNotFound: no session with that id (also for ids that cannot name a
	// session directory).
	ErrNotFound = errors.New("session not found")
	// ErrExists: Create or Fork with an id that is already taken.
	ErrExists = errors.New("session already exists")
	// ErrInvalidID: an id that cannot be used as a directory name.
	ErrInvalidID = errors.New("invalid session id")
	// ErrInUse: the session is held by another handle: in this process, in
	// another process on the same root (file lock), or under another
	// process's lease (shared store). Open, Acquire and Delete return it as
	// an *InUseError naming the holder when it is known.
	ErrInUse = errors.New("session is open")
	// ErrReleased: a write on a released handle; Acquire it first.
	ErrReleased = errors.New("session handle released; acquire it first")
	// ErrFenced: this handle lost the session's lease while holding it (it
	// expired, or its owner was declared dead, and another process took the
	// session over). It can never write at that lease again: Close it, or
	// Release and Acquire it, which reloads what the new holder wrote.
	ErrFenced = errors.New("session lease lost to another owner")
	// ErrClosed: the Session handle was closed.
	ErrClosed = errors.New("session handle closed")
	// ErrInvalidCursor: List got a cursor it did not produce.
	ErrInvalidCursor = errors.New("invalid list cursor")
	// ErrBadSeq: Append/Rewrite got sequence numbers that do not increase.
	ErrBadSeq = errors.New("sequence numbers must increase")
)

// InUseError is the ErrInUse of Open, Acquire and Delete:
// errors.Is(err, ErrInUse) holds, and errors.As names the holder.
type InUseError struct {
	ID string
	// Owner is the incarnation id of the process whose lease holds the
	// session (shared store); "" for the file store.
	Owner string
	// PID is the process id of the holder of the session's file lock (file
	// store, as written in the lock file); 0 when unknown.
	PID int
	// Turn: the holder is running a turn in the session (file store, see
	// TurnMarker).
	Turn bool
}

func (e *InUseError) Error() string {
	turn := ""
	if e.Turn {
		turn = ", which is running a turn in it"
	}
	switch {
	case e.Owner != "":
		return fmt.Sprintf("session %s is open in another iac-code process (incarnation %s)%s", e.ID, e.Owner, turn)
	case e.PID > 0:
		return fmt.Sprintf("session %s is open in another iac-code process (pid %d)%s", e.ID, e.PID, turn)
	}
	return fmt.Sprintf("session %s is already open", e.ID)
}

// TurnMarker is a Session whose hold is a file lock of this machine
// (FileStore): cheap to let go of and take again, so its owner releases it
// whenever no turn runs, and another process asking for the session gets it
// at once (see WithLockWait). MarkTurn(true) at a turn's start and
// MarkTurn(false) at its end tell that process, which then fails at once
// with InUseError.Turn instead of waiting.
type TurnMarker interface {
	MarkTurn(running bool) error
}

// RunningTurn is the turn running in a session as its holder recorded it
// (TurnRecorder), for the session lists of every process on the store and
// for the next holder, which resumes it (TurnKeeper).
type RunningTurn struct {
	StartedAt time.Time
	// PromptRequest is the JSON-RPC id of the turn's session/prompt request,
	// byte for byte as its client sent it.
	PromptRequest []byte
	// Conn is the id of the connection that sent the prompt, whose answer
	// it is owed ("" when unknown); for a prompt relayed from a stub of
	// another pod, the id of the stub's connection there, as the client
	// knows it (not the proxy's).
	Conn string
	// FirstSeq is the Seq of the turn's first history entry (its prompt's
	// user message; 0 when unknown): a resumed turn decides its next step
	// from the entries from there on.
	FirstSeq int64
	// ID names the turn; a resumed turn keeps it ("" when unknown).
	ID string
	// MCPServers are the names of the session's MCP servers as the turn
	// was recorded (none: it had none, or unknown): a holder resuming it
	// without them waits a moment for a client to bring them. Names only:
	// their configurations carry the client's secrets and are never stored.
	MCPServers []string
}

// TurnRecorder is a Session that records the turn running in it with its
// hold: List and ListOwned of any process on the same store report it
// (Meta.RunningTurn) while the handle holds the session — the shared store:
// while its lease is live, so a holder killed mid-turn stops showing one
// once its lease expires or it is declared dead; the file store: while a
// live process holds the session's lock. Release, Close and every new
// acquisition clear it. Unlike TurnMarker it says nothing about how cheap
// the hold is.
type TurnRecorder interface {
	// RecordTurn records turn as running in the session, or that none runs
	// (nil). ErrFenced once the handle lost its hold, ErrReleased, ErrClosed.
	RecordTurn(turn *RunningTurn) error
}

// TurnKeeper is a TurnRecorder whose recorded turn outlives its holder
// (durable turns): a holder that pauses its turn (Pause), dies, or loses its
// lease mid-turn leaves the turn recorded for the next holder, which finds
// it with PriorTurn and resumes it from the history. A left turn is not
// listed (List shows only the turn of a live hold), and stays recorded
// until a holder records another or clears it (RecordTurn) — or releases
// the session with Release or Close, which clear it.
type TurnKeeper interface {
	TurnRecorder
	// PriorTurn is the turn recorded in the session when this handle took
	// it (Open, Acquire): left by a holder that paused it, died or lost its
	// hold mid-turn; nil when none, and on a created or forked session.
	PriorTurn() *RunningTurn
	// Pause is Release keeping the recorded turn for the next holder (the
	// handle's own, recorded with RecordTurn).
	Pause() error
}

// InterruptedTurn is a turn whose process stopped while it ran (killed,
// crashed), recorded as interrupted by the next holder (file store, see
// TurnKeeper.PriorTurn). StartedAt is zero and PromptRequest empty when
// the turn's record did not say.
type InterruptedTurn struct {
	StartedAt time.Time `json:"startedAt"`
	// PromptRequest is the JSON-RPC id of the turn's session/prompt, as its
	// client sent it.
	PromptRequest protocol.RawMessage `json:"promptRequest,omitempty"`
}

// Interrupted is the turn t as interrupted; an id that is not one JSON
// value (a damaged record) is left out.
func (t *RunningTurn) Interrupted() *InterruptedTurn {
	it := &InterruptedTurn{StartedAt: t.StartedAt.UTC()}
	if len(t.PromptRequest) > 0 && protocol.Valid(t.PromptRequest) {
		it.PromptRequest = bytes.Clone(t.PromptRequest)
	}
	return it
}

// Is makes errors.Is(err, ErrInUse) true.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// Store creates, opens, forks, lists and deletes sessions.
//
// Exactly one writer: a Session handle is the only one that can write its
// session. A second Open of a held session fails with ErrInUse until the
// holder's Release or Close; the shared store also hands the session over when the
// holder's lease expires or its owner is declared dead, and the old handle's
// writes then fail with ErrFenced.
type Store interface {
	// Create makes a new session directory from meta (meta.ID required;
	// CreatedAt/UpdatedAt are stamped by the store). ErrExists if taken.
	Create(meta Meta) (Session, error)
	// Open loads meta and history (bad lines are skipped and logged) and
	// returns the writer handle, acquired. ErrNotFound, ErrInUse.
	Open(id string) (Session, []Entry, error)
	// Fork copies srcID's meta and valid history into the new session newID
	// (ForkedFrom = srcID, fresh timestamps). The source may be open.
	Fork(srcID, newID string) (Session, []Entry, error)
	// List returns metas newest first (UpdatedAt desc, then ID), only those
	// whose Cwd equals cwd when cwd != "". cursor is "" or a nextCursor of a
	// previous call; nextCursor is "" on the last page. limit <= 0 means
	// DefaultListLimit. Reads meta files only.
	List(cwd, cursor string, limit int) (metas []Meta, nextCursor string, err error)
	// Stat reads a session's stored meta without opening it (no lock, no
	// lease): ErrNotFound for an unknown or invalid id.
	Stat(id string) (Meta, error)
	// ListOwned is List of the sessions of owner only (Meta.OwnedBy).
	ListOwned(owner, cwd, cursor string, limit int) (metas []Meta, nextCursor string, err error)
	// Delete removes a session. ErrNotFound, ErrInUse.
	Delete(id string) error
}

// Backend is a Store with resources to release at exit: Close releases them
// (the shared store: this process's leases and its connections).
type Backend interface {
	Store
	Close() error
}

// Session is the writer handle of one session, owned by one actor.
type Session interface {
	ID() string
	// Append writes entries at the end of the history (one write call for
	// the batch). Seq 0 is assigned the next number; a non-zero Seq must be
	// greater than every Seq already in the history. Time zero is stamped.
	// Assigned values are written back into the slice when called as
	// Append(slice...). Data reaches the disk at the next Sync.
	Append(entries ...Entry) error
	// LastSeq is the highest sequence number in the history (0 if empty).
	LastSeq() int64
	// Sync fsyncs the history if anything was appended since the last Sync.
	// Call at every turn end. (The shared store commits every Append: no-op.)
	Sync() error
	// Meta returns a copy of the current metadata.
	Meta() Meta
	// SaveMeta atomically replaces meta.json. ID, CreatedAt and ForkedFrom
	// are kept from the stored meta; UpdatedAt is stamped now.
	SaveMeta(meta Meta) error
	// Rewrite atomically replaces the whole history (temp file, fsync,
	// rename, fsync dir). Used to persist a repair that inserts entries in
	// the middle. Seqs must be positive and strictly increasing.
	Rewrite(entries []Entry) error
	// Release syncs, then lets go of the session while the owner is idle:
	// the file store closes its files and its lock, the shared store gives
	// up the lease. The handle stays valid (ID, Meta, LastSeq); writes on a
	// released handle fail with ErrReleased. No-op when released.
	Release() error
	// Acquire takes the session again: an *InUseError when another handle
	// holds it now. When another writer may have changed it while this
	// handle did not hold it (file store: its files are not the ones this
	// handle left; shared store: another owner took the lease since this
	// handle's), changed is true, entries is the history as it is now
	// (LastSeq and Meta follow it) and the owner must replace what it keeps
	// in memory; otherwise entries is nil. No-op on an acquired handle.
	Acquire() (entries []Entry, changed bool, err error)
	// Close syncs and lets go of the handle for good; other calls then
	// return ErrClosed, Close again nil.
	Close() error
}

// DefaultListLimit is the page size of List when limit <= 0.
const DefaultListLimit = 50

// Kind discriminates history entries.
type Kind string

const (
	// KindMessage: a conversation message (user, assistant, tool results).
	KindMessage Kind = "message"
	// KindCompaction: Message is a summary replacing every entry with
	// Seq <= UpTo in what the model sees (see Context).
	KindCompaction Kind = "compaction"
	// KindToolStart: the tool call CallID (of the assistant message before
	// it) is about to run; written before it starts, so that a turn resumed
	// elsewhere knows it may have run (durable turns). No Message; the
	// model never sees it.
	KindToolStart Kind = "tool_start"
	// KindToolResult: Message is a tool message with the one result of the
	// call CallID, written when that call ended. The results of one
	// assistant message's calls, recorded one by one as they end, are one
	// tool message for the model (see Context), in the order of the calls.
	KindToolResult Kind = "tool_result"
	// KindInterrupted: Message is a user message telling the model that
	// the turn Turn was interrupted when its process stopped. Part of the
	// conversation, like a message (see Context); at most one after a
	// prompt (LastPromptInterrupted).
	KindInterrupted Kind = "interrupted"
)

// Entry is one line of history.jsonl.
type Entry struct {
	// Seq numbers entries; it strictly increases along the file.
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	Kind Kind      `json:"kind"`
	// Message is the conversation message, or the summary of a compaction.
	Message llm.Message `json:"message"`
	// UpTo (compaction only) is the Seq of the last entry the summary replaces.
	UpTo int64 `json:"upTo,omitempty"`
	// CallID (tool_start, tool_result) is the tool call's id; Tool
	// (tool_start) its tool's name.
	CallID string `json:"callId,omitempty"`
	Tool   string `json:"tool,omitempty"`
	// Turn (interrupted only) is the turn that was interrupted.
	Turn *InterruptedTurn `json:"turn,omitempty"`
}

// MessageEntry wraps a completed conversation message for Append.
func MessageEntry(m llm.Message) Entry { return Entry{Kind: KindMessage, Message: m} }

// ToolStartEntry records that tool call callID of tool is about to run.
func ToolStartEntry(callID, tool string) Entry {
	return Entry{Kind: KindToolStart, CallID: callID, Tool: tool}
}

// ToolResultEntry records the result of one tool call (a tool_result
// block).
func ToolResultEntry(result llm.Block) Entry {
	return Entry{Kind: KindToolResult, CallID: result.ToolCallID,
		Message: llm.Message{Role: llm.RoleTool, Content: []llm.Block{result}}}
}

// CompactionEntry makes a compaction marker: summary stands in for every
// entry with Seq <= upTo. The summary is a user message with one summary block.
func CompactionEntry(summary string, upTo int64) Entry {
	return Entry{Kind: KindCompaction, UpTo: upTo, Message: llm.Message{
		Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockSummary, Text: summary}},
	}}
}

// InterruptedEntry records that turn was interrupted; note is what the
// model is told (a user message).
func InterruptedEntry(turn *InterruptedTurn, note string) Entry {
	return Entry{Kind: KindInterrupted, Turn: turn, Message: llm.Message{
		Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: note}},
	}}
}

// LastPromptInterrupted reports whether an interrupted record follows the
// last prompt of the history (the last user message): the turn left
// recorded in the session was recorded as interrupted already (the process
// that did it died before clearing the turn).
func LastPromptInterrupted(entries []Entry) bool {
	for i := len(entries) - 1; i >= 0; i-- {
		switch e := &entries[i]; {
		case e.Kind == KindInterrupted:
			return true
		case isMessage(e) && e.Message.Role == llm.RoleUser:
			return false
		}
	}
	return false
}

// Decision is a remembered permission answer for a tool.
type Decision string

const (
	Allow Decision = "allow"
	Deny  Decision = "deny"
)

// Usage is the cumulative token usage of a session.
type Usage struct {
	InputTokens       int64 `json:"inputTokens"`
	OutputTokens      int64 `json:"outputTokens"`
	ThoughtTokens     int64 `json:"thoughtTokens"`
	CachedReadTokens  int64 `json:"cachedReadTokens"`
	CachedWriteTokens int64 `json:"cachedWriteTokens"`
}

// Add returns u plus the usage of one model call or turn.
func (u Usage) Add(o llm.Usage) Usage {
	return Usage{
		InputTokens:       u.InputTokens + o.InputTokens,
		OutputTokens:      u.OutputTokens + o.OutputTokens,
		ThoughtTokens:     u.ThoughtTokens + o.ThoughtTokens,
		CachedReadTokens:  u.CachedReadTokens + o.CachedReadTokens,
		CachedWriteTokens: u.CachedWriteTokens + o.CachedWriteTokens,
	}
}

// Meta is the content of meta.json.
type Meta struct {
	// Version of the on-disk format (written as FormatVersion).
	Version   int       `json:"version"`
	ID        string    `json:"id"`
	Cwd       string    `json:"cwd"`
	Title     string    `json:"title,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	Mode      string    `json:"mode,omitempty"`
	Model     string    `json:"model,omitempty"`
	// Config holds session config option values by option id.
	Config map[string]string `json:"config,omitempty"`
	// Permissions holds allow_always / reject_always decisions per tool name.
	Permissions map[string]Decision `json:"permissions,omitempty"`
	Usage       Usage               `json:"usage"`
	// ForkedFrom is the id of the session this one was forked from.
	ForkedFrom string `json:"forkedFrom,omitempty"`
	// AdditionalDirectories are the workspace roots besides Cwd the session
	// was last opened with (ACP additionalDirectories), absolute.
	AdditionalDirectories []string `json:"additionalDirectories,omitempty"`
	// Owner is the principal the session belongs to; "" in sessions stored
	// before sessions had owners, which are DefaultOwner's (see OwnedBy).
	// It never changes after Create (Fork: the source's owner).
	Owner string `json:"owner,omitempty"`
	// RunningTurn is the turn its holder records as running in the session
	// (TurnRecorder), filled in by List and ListOwned only; never part of
	// meta.json or of the meta a handle keeps.
	RunningTurn *RunningTurn `json:"-"`
	// InterruptedTurn is the session's last turn when its process stopped
	// while it ran, recorded by the next holder until the next turn starts.
	InterruptedTurn *InterruptedTurn `json:"interruptedTurn,omitempty"`
}

// DefaultOwner owns the sessions stored before sessions had owners; it is
// the principal of stdio and of the shared HTTP token.
const DefaultOwner = "default"

// OwnedBy is the session's owner, DefaultOwner when none is stored.
func (m Meta) OwnedBy() string {
	if m.Owner == "" {
		return DefaultOwner
	}
	return m.Owner
}

// FormatVersion is the version written into meta.json.
const FormatVersion = 1

// born is a copy of m for a new session id (Create, Fork): current format
// version, created and updated now.
func (m Meta) born(id, forkedFrom string, now time.Time) Meta {
	m = m.clone()
	m.RunningTurn, m.InterruptedTurn = nil, nil
	m.Version = FormatVersion
	m.ID = id
	m.ForkedFrom = forkedFrom
	m.Owner = m.OwnedBy()
	m.CreatedAt = now
	m.UpdatedAt = now
	return m
}

// replacing is a copy of m ready to replace stored (SaveMeta): id, creation
// time and fork origin stay as stored; updated now.
func (m Meta) replacing(stored Meta, now time.Time) Meta {
	m = m.clone()
	m.RunningTurn = nil
	m.Version = FormatVersion
	m.ID = stored.ID
	m.CreatedAt = stored.CreatedAt
	m.ForkedFrom = stored.ForkedFrom
	m.Owner = stored.OwnedBy() // an old meta gets its owner written in place
	m.UpdatedAt = now
	return m
}

func (m Meta) clone() Meta {
	if m.Config != nil {
		c := make(map[string]string, len(m.Config))
		for k, v := range m.Config {
			c[k] = v
		}
		m.Config = c
	}
	if m.Permissions != nil {
		p := make(map[string]Decision, len(m.Permissions))
		for k, v := range m.Permissions {
			p[k] = v
		}
		m.Permissions = p
	}
	m.AdditionalDirectories = append([]string(nil), m.AdditionalDirectories...)
	return m
}

// DefaultRoot is $IAC_CODE_HOME, or ~/.iac-code when it is unset.
func DefaultRoot() (string, error) {
	if h := os.Getenv("IAC_CODE_HOME"); h != "" {
		return h, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".iac-code"), nil
}

// maxIDLen bounds session ids (a uuid is 36).
const maxIDLen = 128

// ValidID reports whether id can name a session directory: 1-128 characters
// of [A-Za-z0-9._-], not starting with a dot (so no "..", no separators).
func ValidID(id string) bool {
	if id == "" || len(id) > maxIDLen || id[0] == '.' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// titleMax is the longest title TitleFrom returns, in runes.
const titleMax = 80

// TitleFrom makes a session title from the first user text: whitespace
// collapsed to single spaces, trimmed, at most 80 runes; longer text is cut
// (at a word boundary when one is near) and ends with "…".
func TitleFrom(text string) string {
	t := strings.Join(strings.Fields(text), " ")
	if utf8.RuneCountInString(t) <= titleMax {
		return t
	}
	all := []rune(t)
	runes := all[:titleMax-1]
	cut := len(runes)
	if all[cut] != ' ' { // mid-word: back off to a space close by
		for i := cut - 1; i >= cut-20 && i > 0; i-- {
			if runes[i] == ' ' {
				cut = i
				break
			}
		}
	}
	return strings.TrimRight(string(runes[:cut]), " ") + "…"
}
