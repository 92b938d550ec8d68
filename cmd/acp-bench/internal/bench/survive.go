package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/acpclient"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/stats"
	"github.com/iac-code/iac-code/llm/llmtest"
)

// SurviveParams sizes survive.
type SurviveParams struct {
	// Turns running on the pod that goes (100).
	Turns int
	// Pods in the cluster (3): pod 0 holds every session, the others
	// prompt them and adopt the turns.
	Pods int
	// Kill: kill -9 pod 0; else SIGTERM (its drain hands the turns over).
	Kill bool
	// Steps per turn (30), each a bash call of Sleep (300 ms).
	Steps int
	Sleep time.Duration
	// Timeout bounds the run (0: derived from the sizes).
	Timeout time.Duration
}

func (p *SurviveParams) defaults() {
	p.Turns, p.Pods, p.Steps = orDefaultInt(p.Turns, 100), max(orDefaultInt(p.Pods, 3), 2), orDefaultInt(p.Steps, 30)
	if p.Sleep <= 0 {
		p.Sleep = 300 * time.Millisecond
	}
	if p.Timeout <= 0 {
		p.Timeout = 2*time.Minute + 3*time.Duration(p.Steps)*p.Sleep
	}
}

func orDefaultInt(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

// surviveKey names turn i in its prompt ("run bench-turn-007").
func surviveKey(i int) string { return fmt.Sprintf("bench-turn-%03d", i) }

// turnLog is what the fake model saw of each turn: when each of its
// requests came, and from which pod (each pod has its own API key).
type turnLog struct {
	mu   sync.Mutex
	reqs map[string][]turnRequest
}

type turnRequest struct {
	at  time.Time
	pod string
}

func (l *turnLog) add(key, pod string, at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs[key] = append(l.reqs[key], turnRequest{at: at, pod: pod})
	return len(l.reqs[key])
}

// resumedAfter is when turn key's first request after t came from another
// pod than gone (zero: none).
func (l *turnLog) resumedAfter(key, gone string, t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.reqs[key] {
		if r.at.After(t) && r.pod != gone {
			return r.at
		}
	}
	return time.Time{}
}

func (l *turnLog) least(keys []string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := -1
	for _, k := range keys {
		if c := len(l.reqs[k]); n < 0 || c < n {
			n = c
		}
	}
	return n
}

// stepResponder scripts every turn from its own requests: Steps bash calls
// of sleep, then a text; a request asked again gets the same step.
func stepResponder(p SurviveParams, log *turnLog) llmtest.Responder {
	sleep := fmt.Sprintf("sleep %.3f", p.Sleep.Seconds())
	return func(req llmtest.RecordedRequest) (string, llmtest.Reply, bool) {
		key, done := "", 0
		for _, m := range req.Chat.Messages {
			switch {
			case m.Role == "user" && strings.HasPrefix(m.Text(), "run bench-turn-"):
				key, done = strings.TrimPrefix(m.Text(), "run "), 0
			case m.Role == "tool":
				done++
			}
		}
		if key == "" {
			return "", llmtest.Reply{}, false
		}
		log.add(key, req.Header.Get("Authorization"), req.At)
		if done >= p.Steps {
			return key, llmtest.Reply{Text: "done"}, true
		}
		args, _ := json.Marshal(map[string]string{"command": sleep})
		return key, llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: fmt.Sprintf("c%d", done+1), Name: "bash", Arguments: string(args)}}}, true
	}
}

// Survive measures what the end of a pod costs the turns running on it
// (issue 29). Turns sessions held by pod 0 are prompted through
// connections of the other pods (the turns a drain hands over), each turn
// Steps bash calls of Sleep; once every turn asked the model twice, pod 0
// gets SIGTERM (or kill -9). A turn's resume time runs from the signal to
// its first model request from another pod (the adopter's next step: a
// turn paused or cut in a tool call asks the model first; one cut in a
// model reply asks it again; one paused after a whole reply runs its
// calls first, one Sleep later). Every prompt must still end end_turn.
func Survive(ctx context.Context, o *Options, p SurviveParams) (*Result, error) {
	p.defaults()
	how := "sigterm"
	if p.Kill {
		how = "kill"
	}
	r := newResult("survive", how+",turns="+fmt.Sprint(p.Turns), map[string]any{
		"turns": p.Turns, "pods": p.Pods, "signal": how, "steps": p.Steps, "sleep": p.Sleep.String()})
	// The request log is cleared every 2 s: the turns' requests are
	// followed by the responder (turnLog).
	fake, stopFake := startFake(2 * time.Second)
	defer stopFake()
	log := &turnLog{reqs: map[string][]turnRequest{}}
	fake.SetResponder(stepResponder(p, log))
	cl, err := startCluster(ctx, o, fake.URL(), p.Pods)
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	deadline := time.Now().Add(p.Timeout)
	var errs stats.Counter
	hs := make([]*acpclient.HTTP, len(cl.pods))
	for i, s := range cl.pods {
		hs[i] = o.newHTTP(s.Addr, p.Turns+16)
		defer hs[i].Close()
	}

	// The sessions, on one connection of pod 0, which holds them all.
	holder, err := dialConn(ctx, hs[0], deadline)
	if err != nil {
		return nil, fmt.Errorf("pod 0: %w", err)
	}
	sids := make([]string, p.Turns)
	keys := make([]string, p.Turns)
	for i := range sids {
		keys[i] = surviveKey(i)
		if sids[i], err = holder.newSession(ctx, o.Workdir); err != nil {
			return nil, fmt.Errorf("session/new: %w", err)
		}
		if _, err = holder.call(ctx, func(id int64) []byte {
			return acpclient.Request(id, "session/set_mode", map[string]any{"sessionId": sids[i], "modeId": "bypass"})
		}, nil); err != nil {
			return nil, fmt.Errorf("session/set_mode: %w", err)
		}
	}
	// Each prompted through its own connection on another pod.
	prompters := make([]*hconn, p.Turns)
	parallel(p.Turns, 16, func(i int) {
		c, err := dialConn(ctx, hs[1+i%(p.Pods-1)], deadline)
		if err != nil {
			errs.Inc(errKey("connect", err))
			return
		}
		if _, err := c.call(ctx, func(id int64) []byte {
			return acpclient.Request(id, "session/load", map[string]any{"sessionId": sids[i], "cwd": o.Workdir, "mcpServers": []any{}})
		}, nil); err != nil {
			errs.Inc(errKey("session/load", err))
			_ = c.close(ctx)
			return
		}
		prompters[i] = c
	})
	defer closeConns(context.Background(), prompters, nil)

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		ended int
	)
	for i, c := range prompters {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := c.call(ctx, func(id int64) []byte { return acpclient.Prompt(id, sids[i], "run "+keys[i]) }, nil)
			switch {
			case err != nil:
				errs.Inc(errKey("prompt", err))
			case acpclient.StopReason(m.Result) != "end_turn":
				errs.Inc("prompt: " + acpclient.StopReason(m.Result))
			default:
				mu.Lock()
				ended++
				mu.Unlock()
			}
		}()
	}
	for log.least(keys) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	gone := "Bearer " + podAPIKey(0)
	signalled := time.Now()
	sig := syscall.SIGTERM
	if p.Kill {
		sig = syscall.SIGKILL
	}
	cl.pods[0].signalled.Store(true) // its death is ours
	if err := cl.pods[0].Cmd.Process.Signal(sig); err != nil {
		return nil, err
	}
	wg.Wait()

	hist := stats.NewHistogram()
	var lost int
	for _, k := range keys {
		at := log.resumedAfter(k, gone, signalled)
		if at.IsZero() {
			lost++
			continue
		}
		hist.RecordDuration(at.Sub(signalled))
	}
	sum := hist.Summary()
	r.add("turns", float64(p.Turns), "turns")
	r.add("resumed", float64(hist.Count()), "turns").Note = "asked the model from another pod after the signal"
	r.add("ended end_turn", float64(ended), "turns")
	r.add("resume p50", sum.P50MS, "ms").Note = "signal → the turn's first model request from another pod"
	r.add("resume p99", sum.P99MS, "ms")
	r.add("resume max", sum.MaxMS, "ms")
	r.latency("resume", hist)
	if lost > 0 {
		r.fail("%d turns never asked the model from another pod", lost)
	}
	if ended != p.Turns {
		r.fail("%d of %d prompts ended end_turn", ended, p.Turns)
	}
	r.finish(nil, errs.Snapshot())
	return r, nil
}
