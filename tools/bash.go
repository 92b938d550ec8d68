package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/iac-code/iac-code/tools/sandbox"
)

// NameBash is the bash tool's name.
const NameBash = "bash"

// Bash runs a shell command.
//
// The command runs as `bash -c <command>` in Env.Cwd with stdin from
// /dev/null, in its own process group. When the timeout expires or ctx is
// done, the whole group gets SIGTERM (and SIGCONT, so stopped members see
// it), then SIGKILL after Limits.BashKillGrace. When the main process exits
// normally, members of its group still running (background jobs such as
// `server &`) are ended the same way: nothing the command started in its
// group outlives the call. A process that deliberately leaves the group
// (setsid, or `setsid nohup cmd >log 2>&1 &`) is not touched; if it still
// holds the output pipes, reading stops shortly after the group is gone.
//
// Output is streamed through Env.Progress (stdout and stderr interleaved as
// they arrive): each call carries only new text, calls are at least
// Limits.ProgressInterval apart (≤ 10/s by default, output in between is
// coalesced), chunks never split a UTF-8 sequence, and a final call flushes
// the rest before Run returns. Progress is never called after Run returns.
// The Result's Output has [stdout], [stderr] and [exit code: N] sections;
// IsError is set for a non-zero exit, a timeout, a cancel or a failure to
// start. Raw is a map with "pid" (also the process group id), "exitCode",
// "timedOut", "cancelled" and, when killed by a signal, "signal".
type Bash struct{ Limits Limits }

func (Bash) Name() string { return NameBash }
func (t Bash) Description() string {
	l := t.Limits.WithDefaults()
	return fmt.Sprintf("Run a shell command with `bash -c` in the working directory (stdin is /dev/null, so nothing can "+
		"prompt). Returns stdout, stderr and the exit code. timeout is in seconds (default %d, max %d); on timeout the "+
		"command and everything it started are killed. Background processes (`cmd &`) are killed when the command "+
		"finishes. Prefer read_file, list_files, glob, grep, edit_file and write_file over shell equivalents.",
		int(l.BashTimeout/time.Second), int(l.BashMaxTimeout/time.Second))
}
func (t Bash) Schema() json.RawMessage {
	l := t.Limits.WithDefaults()
	return json.RawMessage(`{"type":"object","properties":{` +
		`"command":{"type":"string","description":"The command line, run with bash -c"},` +
		`"timeout":{"type":"number","exclusiveMinimum":0,"maximum":` + strconv.Itoa(int(l.BashMaxTimeout/time.Second)) +
		`,"description":"Timeout in seconds (default ` + strconv.Itoa(int(l.BashTimeout/time.Second)) + `)"}},` +
		`"required":["command"],"additionalProperties":false}`)
}
func (Bash) Kind() Kind     { return KindExecute }
func (Bash) ReadOnly() bool { return false }

type bashInput struct {
	Command *string  `json:"command"`
	Timeout *float64 `json:"timeout"`
}

type bashCall struct {
	t       Bash
	command string
	dir     string
	timeout time.Duration
	jail    *sandbox.Jail
}

func (t Bash) Prepare(env *Env, input json.RawMessage) (Call, error) {
	var in bashInput
	if err := decodeInput(NameBash, input, &in); err != nil {
		return nil, err
	}
	if err := requireString(NameBash, "command", in.Command); err != nil {
		return nil, err
	}
	l := t.Limits.WithDefaults()
	timeout := l.BashTimeout
	if in.Timeout != nil {
		secs := *in.Timeout
		maxSecs := l.BashMaxTimeout.Seconds()
		if math.IsNaN(secs) || secs <= 0 || secs > maxSecs {
			return nil, inputError(NameBash, fmt.Sprintf("field 'timeout' must be a number of seconds in (0, %g]", maxSecs))
		}
		timeout = time.Duration(secs * float64(time.Second))
	}
	return &bashCall{t: t, command: *in.Command, dir: envCwd(env), timeout: timeout, jail: envJail(env)}, nil
}

// Title is the command itself, whole (up to titleMaxRunes), so that a
// permission request never hides part of what will run.
func (c *bashCall) Title() string         { return printable(c.command, titleMaxRunes) }
func (c *bashCall) Locations() []Location { return nil }
func (c *bashCall) Access() Access        { return Access{} }

// Sandbox: a command run here is contained by the session's jail; one run
// in the client's terminal is the editor's to contain.
func (c *bashCall) Sandbox(caps ClientCaps) map[string]any {
	if c.jail == nil || caps.Terminal || !c.jail.Status().Active() {
		return nil // not contained (IAC_CODE_SANDBOX=on without Landlock: it will not run)
	}
	return c.jail.Meta()
}

func (c *bashCall) Run(ctx context.Context, progress func(string)) Result {
	return runShell(ctx, shellRun{
		command:  c.command,
		dir:      c.dir,
		timeout:  c.timeout,
		limits:   c.t.Limits.WithDefaults(),
		progress: progress,
		jail:     c.jail,
	})
}

type shellRun struct {
	command  string
	dir      string
	timeout  time.Duration
	limits   Limits
	progress func(string)
	// jail, when set, contains the command (and all it starts).
	jail *sandbox.Jail
}

// shellOutcome is what the platform runner reports.
type shellOutcome struct {
	pid       int
	exitCode  int
	signal    string
	timedOut  bool
	cancelled bool
}

func formatShellResult(r shellRun, o shellOutcome, stdout, stderr string) Result {
	res := shellResult(r.timeout, o, [][2]string{{"stdout", stdout}, {"stderr", stderr}}, "", "the command and its process group were killed")
	res.Raw.(map[string]any)["pid"] = o.pid
	return res
}

// shellResult is the result of a command run locally or in a client
// terminal: its output sections, a note (truncation), how it ended; killed
// says what a timeout or cancel did. Raw is a map with "exitCode",
// "timedOut", "cancelled" and "signal".
func shellResult(timeout time.Duration, o shellOutcome, sections [][2]string, note, killed string) Result {
	var b strings.Builder
	empty := true
	for _, s := range sections {
		name, text := s[0], s[1]
		if text == "" {
			continue
		}
		empty = false
		b.WriteString("[" + name + "]\n")
		b.WriteString(text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteByte('\n')
		}
	}
	if empty {
		b.WriteString("[no output]\n")
	}
	if note != "" {
		b.WriteString(note + "\n")
	}
	switch {
	case o.timedOut:
		fmt.Fprintf(&b, "[timed out after %s: %s]\n", formatSeconds(timeout), killed)
	case o.cancelled:
		fmt.Fprintf(&b, "[cancelled: %s]\n", killed)
	}
	if o.signal != "" {
		fmt.Fprintf(&b, "[exit code: %d (killed by %s)]", o.exitCode, o.signal)
	} else {
		fmt.Fprintf(&b, "[exit code: %d]", o.exitCode)
	}
	raw := map[string]any{"exitCode": o.exitCode, "timedOut": o.timedOut, "cancelled": o.cancelled}
	if o.signal != "" {
		raw["signal"] = o.signal
	}
	return Result{
		Output:  b.String(),
		IsError: o.exitCode != 0 || o.timedOut || o.cancelled,
		Raw:     raw,
	}
}

func formatSeconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", int(d/time.Second))
	}
	return d.String()
}

// headTail keeps the first and last max/2 bytes written to it.
type headTail struct {
	mu    sync.Mutex
	half  int
	head  []byte
	tail  []byte
	total int64
}

func newHeadTail(max int) *headTail { return &headTail{half: max / 2} }

func (h *headTail) Write(p []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total += int64(len(p))
	if n := h.half - len(h.head); n > 0 {
		n = min(n, len(p))
		h.head = append(h.head, p[:n]...)
		p = p[n:]
	}
	if len(p) == 0 {
		return
	}
	h.tail = append(h.tail, p...)
	if len(h.tail) > 2*h.half {
		n := copy(h.tail, h.tail[len(h.tail)-h.half:])
		h.tail = h.tail[:n]
	}
}

func (h *headTail) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	tail := h.tail
	kept := int64(len(h.head) + len(tail))
	if kept == h.total {
		return strings.ToValidUTF8(string(h.head)+string(tail), "\uFFFD")
	}
	if len(tail) > h.half {
		tail = tail[len(tail)-h.half:]
	}
	omitted := h.total - int64(len(h.head)) - int64(len(tail))
	return strings.ToValidUTF8(string(h.head), "\uFFFD") +
		fmt.Sprintf("\n[... %d bytes omitted ...]\n", omitted) +
		strings.ToValidUTF8(string(tail), "\uFFFD")
}

// progressStreamer forwards output to a Progress callback: only new text
// each call, calls at least interval apart, UTF-8 sequences never split,
// a final flush on finish.
type progressStreamer struct {
	fn         func(string)
	interval   time.Duration
	maxPending int

	mu      sync.Mutex
	pending []byte
	dropped int64

	notify   chan struct{}
	stop     chan struct{}
	finished chan struct{}
}

func newProgressStreamer(fn func(string), interval time.Duration, maxPending int) *progressStreamer {
	s := &progressStreamer{
		fn: fn, interval: interval, maxPending: maxPending,
		notify: make(chan struct{}, 1), stop: make(chan struct{}), finished: make(chan struct{}),
	}
	go s.loop()
	return s
}

func (s *progressStreamer) Write(p []byte) {
	if s == nil || len(p) == 0 {
		return
	}
	s.mu.Lock()
	if room := s.maxPending - len(s.pending); room < len(p) {
		// The client is not keeping up: drop what does not fit.
		room = max(room, 0)
		s.dropped += int64(len(p) - room)
		p = p[:room]
	}
	s.pending = append(s.pending, p...)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *progressStreamer) loop() {
	defer close(s.finished)
	var last time.Time
	for {
		stopping := false
		select {
		case <-s.notify:
		case <-s.stop:
			stopping = true
		}
		if !last.IsZero() && s.hasPending() {
			if wait := s.interval - time.Since(last); wait > 0 {
				time.Sleep(wait)
			}
		}
		if s.flush(stopping) {
			last = time.Now()
		}
		if stopping {
			return
		}
	}
}

func (s *progressStreamer) hasPending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending) > 0 || s.dropped > 0
}

// flush sends the pending text; it reports whether fn was called.
func (s *progressStreamer) flush(final bool) bool {
	s.mu.Lock()
	chunk := s.pending
	dropped := s.dropped
	var keep []byte
	if !final {
		// Hold back an incomplete UTF-8 sequence at the end.
		for i := 1; i <= utf8.UTFMax && i <= len(chunk); i++ {
			if utf8.RuneStart(chunk[len(chunk)-i]) {
				if !utf8.FullRune(chunk[len(chunk)-i:]) {
					keep = append([]byte(nil), chunk[len(chunk)-i:]...)
					chunk = chunk[:len(chunk)-i]
				}
				break
			}
		}
	}
	s.pending = keep
	s.dropped = 0
	s.mu.Unlock()
	if len(chunk) == 0 && dropped == 0 {
		return false
	}
	text := strings.ToValidUTF8(string(chunk), "\uFFFD")
	if dropped > 0 {
		text += fmt.Sprintf("\n[... %d bytes of output not shown ...]\n", dropped)
	}
	s.fn(text)
	return true
}

// finish flushes what is left and waits until the last call returned.
func (s *progressStreamer) finish() {
	if s == nil {
		return
	}
	close(s.stop)
	<-s.finished
}

func envJail(env *Env) *sandbox.Jail {
	if env == nil {
		return nil
	}
	return env.Jail
}
