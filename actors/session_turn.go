package actors

import (
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// The session's turn slot: the one running turn, its cancel, its end (the
// prompt's answer, what waited for it) and the owner's running-turn count.

// turnState is the turn slot's state.
type turnState uint8

const (
	turnIdle turnState = iota
	turnRunning
	// turnCancelling: the running turn was told to cancel (cancelTurn); a
	// diff read for its permission request comes back to nothing.
	turnCancelling
	// turnPausing: the running turn was told to pause at its next step
	// boundary (session_pause.go).
	turnPausing
)

// turnSlot is the session's one running turn; only this file writes its
// fields (soFar is written by its own file, session_active.go).
type turnSlot struct {
	state turnState
	pid   *actor.PID
	// id numbers the turns; a tool's request to the client is sent only
	// while its turn runs.
	id int64
	// prompt is the prompt the running turn answers, claimed with the
	// slot and handed back by its end; zero while the slot is free.
	prompt turnPrompt
	// counted: the running turn holds one of its owner's slots
	// (MaxTurnsPerUser).
	counted bool
	// soFar: the running turn and its message so far (session_active.go).
	soFar turnSoFar
}

// turnPrompt is the prompt a turn answers: id is its JSON-RPC id; conn
// asked it: its answer goes there even when the session moved to another
// connection meanwhile (nil: it is answered to no one here, a turn
// resumed from another pod or disowned). client is the id of the
// connection its client is on (sessionWho.client): a turn resumed on
// another pod, whose conn is gone, is owed to that client (promptKey).
type turnPrompt struct {
	id     protocol.RawMessage
	conn   *actor.PID
	client string
}

// key is p as promptKey names it.
func (p turnPrompt) key() promptKey { return keyOfPrompt(p.client, p.id) }

func (t *turnSlot) running() bool    { return t.state != turnIdle }
func (t *turnSlot) cancelling() bool { return t.state == turnCancelling }
func (t *turnSlot) pausing() bool    { return t.state == turnPausing }

// of reports whether the running turn is the prompt of conn.
func (t *turnSlot) of(conn *actor.PID) bool { return t.running() && conn.Equal(t.prompt.conn) }

// claim takes the slot for prompt p and numbers its turn (spawned next,
// then run).
func (t *turnSlot) claim(p turnPrompt) int64 {
	t.prompt = p
	t.id++
	return t.id
}

// answerTo makes conn the connection the running turn answers, when its
// prompt is the one p names and its own connection is gone (detached is
// true of it): a client following the session here is owed that answer
// (session_followlog.go). A turn being cancelled is not handed on.
func (t *turnSlot) answerTo(p promptKey, conn *actor.PID, detached func(*actor.PID) bool) bool {
	if !t.running() || t.cancelling() || !t.prompt.key().names(p) || !detached(t.prompt.conn) {
		return false
	}
	t.prompt.conn = conn
	return true
}

// run: the turn's actor is pid.
func (t *turnSlot) run(pid *actor.PID) { t.state, t.pid = turnRunning, pid }

// disown: the running turn, when conn's, is nobody's prompt any more (its
// connection is gone with its pod): it runs on and its end is answered to
// no one.
func (t *turnSlot) disown(conn *actor.PID) {
	if t.of(conn) {
		t.prompt.conn = nil
	}
}

// end frees the slot, and returns the prompt to answer (a resumed turn's
// answer is kept by its key when its connection is not here).
func (t *turnSlot) end() turnPrompt {
	p := t.prompt
	t.state, t.pid, t.prompt = turnIdle, nil, turnPrompt{}
	return p
}

// promptKey names a prompt across pods: the id of the connection its
// client is on (sessionWho.client; "" when unknown) and its JSON-RPC id
// (protocol.IDKey). Clients number their requests each on their own: two
// clients of a session often send prompts of one id, so the id alone
// names none.
type promptKey struct{ client, id string }

func keyOfPrompt(client string, id protocol.RawMessage) promptKey {
	return promptKey{client: client, id: protocol.IDKey(id)}
}

// names reports whether k, a prompt the session owes, is the prompt p: the
// same id from the same client's connection. A client unknown on either
// side (named by a pod of an older version, which did not say) leaves the
// id alone to decide, as it did then.
func (k promptKey) names(p promptKey) bool {
	return k.id == p.id && (k.client == p.client || k.client == "" || p.client == "")
}

// recordedClient is the client of a turn's prompt as the store recorded
// it (store.RunningTurn.Conn): a proxy's own id, which a pod of an older
// version recorded, names no client (unknown).
func recordedClient(conn string) string {
	if strings.HasPrefix(conn, proxyConnPrefix) {
		return ""
	}
	return conn
}

// count: the turn holds one of its owner's slots.
func (s *session) countTurn() { s.turn.counted = true }

// cancelTurn tells the running turn to end cancelled.
func (s *session) cancelTurn(ctx actor.Context) {
	s.turn.state = turnCancelling
	ctx.Send(s.turn.pid, &cancelTurn{})
}

func (s *session) endTurn(ctx actor.Context, m *turnFinished) {
	if !s.turn.running() {
		return
	}
	s.turn.state, s.turn.pid = turnIdle, nil
	s.markTurn(false)
	s.releaseTurnCount()
	s.dropPermissionAsks(ctx)
	var (
		repaired, added []store.Entry
		err             error
	)
	if s.lease.fenced == nil {
		repaired, added, err = store.RepairSession(s.store, s.entries)
	} else {
		repaired, added = store.Repair(s.entries) // for the client only
	}
	if err != nil {
		s.writeFailed(err, "repair session history")
	} else if len(added) > 0 {
		s.entries = repaired
		// Tool calls cut short (cancel, close, crash) got no final update
		// from their stopped tool actors: close them for the client as the
		// history now has them, failed and interrupted, before the answer —
		// the same updates a later load replays.
		for i := range added {
			for _, u := range replayUpdates(&added[i].Message, replayMessageID(s.id, &added[i])) {
				s.emit(ctx, u)
			}
		}
	}
	s.syncStore()
	// The turn's one metadata write: its usage, the time, and whatever
	// changed while it ran (see changeMeta).
	s.meta.Usage = s.meta.Usage.Add(m.usage)
	s.saveMeta()
	// Told before the answer, which stays the turn's last frame.
	s.finishTurn(ctx)
	prompt := s.turn.end()
	var (
		result any
		e      *protocol.Error
	)
	switch {
	case s.lease.fenced != nil:
		// Whatever the turn's end: what it did since the takeover is lost.
		e = s.lease.fenced
	case m.err != nil:
		e = m.err
	default:
		result = protocol.PromptResponse{StopReason: m.stopReason, Usage: promptUsage(m.usage)}
	}
	// A file store's lock is let go of before the answer, not after the
	// message (Receive): whoever the answer reaches can open the session
	// from another process at once. A fenced session lets go in
	// stopWriting, an ending one in finishEnding.
	if s.lease.fenced == nil && !s.phase.lettingGo() {
		s.releaseBetweenTurns()
	}
	if prompt.conn != nil {
		s.respondTo(ctx, prompt.conn, prompt.id, result, e)
	} else if prompt.id != nil {
		// A resumed turn whose prompt's connection is not on this process:
		// its end is recorded (whoever loads the session sees it), and its
		// answer kept for that connection, which may be following the
		// session here (session_followlog.go).
		s.followers.keepAnswer(prompt.key(), answerData(prompt.id, result, e))
	}
	s.answerDrainers(ctx)
	if s.phase.lettingGo() {
		s.finishEnding(ctx) // the ending waited for the turn
		return
	}
	s.startQueued(ctx)
	s.endUnattended(ctx)
}

// releaseTurnCount gives the owner's running-turn slot back (see
// MaxTurnsPerUser), once.
func (s *session) releaseTurnCount() {
	if s.turn.counted {
		s.turn.counted = false
		s.deps.turns.release(s.owner)
	}
}
