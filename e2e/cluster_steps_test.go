package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/store"
)

// Turns of many steps run at once on a cluster (issue 29's acceptance): each
// turn is prompted "run <key>" and its model, scripted from the requests
// themselves, asks for one bash step at a time, each appending its line to
// <key>.txt in the session's cwd. The reply depends only on how many tool
// results the request carries, so a request asked again (a reply cut by a
// dying pod) gets the same step, and a turn resumed elsewhere goes on where
// its history stands.

// stepKey finds a turn's key in its prompt.
var stepKey = regexp.MustCompile(`turn-[0-9]{2}`)

// stepsModel answers the model requests of every "run turn-NN" prompt:
// steps bash calls ("echo step-N >> turn-NN.txt; sleep <sleep>"), then the
// text "turn-NN done." Other requests take the fake's queue.
func stepsModel(fake *llmtest.Server, steps int, sleep string) {
	fake.SetResponder(func(req llmtest.RecordedRequest) (string, llmtest.Reply, bool) {
		key, done := "", 0
		for _, m := range req.Chat.Messages {
			switch m.Role {
			case "user":
				if k := stepKey.FindString(m.Text()); k != "" && strings.HasPrefix(m.Text(), "run ") {
					key, done = k, 0
				}
			case "tool":
				done++
			}
		}
		switch {
		case key == "":
			return "", llmtest.Reply{}, false
		case done >= steps:
			return key, llmtest.Reply{Text: key + " done."}, true
		}
		n := done + 1
		return key, toolCallReply(fmt.Sprintf("%s-s%d", key, n), "bash",
			map[string]any{"command": fmt.Sprintf("echo step-%d >> %s.txt; sleep %s", n, key, sleep)}), true
	})
}

// stepLines are the lines of key's file in cwd.
func stepLines(cwd, key string) []string {
	b, err := os.ReadFile(filepath.Join(cwd, key+".txt"))
	if os.IsNotExist(err) {
		return nil
	}
	Expect(err).NotTo(HaveOccurred())
	return strings.Fields(string(b))
}

// cutSteps are the tool calls of key that the model was told were cut
// (store.ToolCutText), by id, from every request of key.
func cutSteps(fake *llmtest.Server, key string) map[string]bool {
	cut := map[string]bool{}
	for _, r := range fake.Requests() {
		if r.Key != key {
			continue
		}
		for _, m := range r.Chat.Messages {
			if m.Role == "tool" && strings.Contains(m.Text(), store.ToolCutText) {
				cut[m.ToolCallID] = true
			}
		}
	}
	return cut
}

// expectStepsOnce checks key's side effects: every step's line at most
// once and in order; a missing one only for the step the model was told was
// cut, and at most one step cut. It returns the steps cut.
func expectStepsOnce(fake *llmtest.Server, cwd, key string, steps int) []int {
	GinkgoHelper()
	lines := stepLines(cwd, key)
	cut := cutSteps(fake, key)
	Expect(len(cut)).To(BeNumerically("<=", 1), "%s: at most the step running at the cut is reported interrupted: %v", key, cut)
	var cutN []int
	next := 1
	for _, l := range lines {
		var n int
		_, err := fmt.Sscanf(l, "step-%d", &n)
		Expect(err).NotTo(HaveOccurred(), "%s: line %q", key, l)
		Expect(n).To(BeNumerically(">=", next), "%s: a step ran twice or out of order: %v", key, lines)
		for ; next < n; next++ {
			Expect(cut).To(HaveKey(fmt.Sprintf("%s-s%d", key, next)),
				"%s: step %d has no line and was not reported cut: %v", key, next, lines)
		}
		next = n + 1
	}
	Expect(next-1).To(Equal(steps), "%s: every step ran: %v", key, lines)
	for id := range cut {
		var n int
		_, err := fmt.Sscanf(strings.TrimPrefix(id, key), "-s%d", &n)
		Expect(err).NotTo(HaveOccurred())
		cutN = append(cutN, n)
	}
	Expect(fake.MaxConcurrentFor(key)).To(BeEquivalentTo(1), "%s: two model requests of the turn at once", key)
	return cutN
}

// waitFor reads c's stream up to the first message matching, until
// deadline; it keeps what it read. ok is false at the deadline or the
// stream's end.
func (c *acpConn) waitFor(deadline time.Time, match func(map[string]any) bool) (map[string]any, bool) {
	for _, ev := range c.events {
		if match(ev.msg) {
			return ev.msg, true
		}
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-c.s.events:
			if !ok {
				return nil, false
			}
			c.events = append(c.events, ev)
			if match(ev.msg) {
				return ev.msg, true
			}
		case <-timer.C:
			return nil, false
		}
	}
}

// turnEndOf matches the session_info_update that says sid's turn ended.
func turnEndOf(sid string) func(map[string]any) bool {
	return func(m map[string]any) bool {
		return isTurnEnd(m) && m["params"].(map[string]any)["sessionId"] == sid
	}
}

// bypass lets sid's tools run without asking.
func (c *acpConn) bypass(sid string) {
	GinkgoHelper()
	Expect(c.result("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"})).To(BeEmpty())
}
