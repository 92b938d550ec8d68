package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

// Queued prompts: a session/prompt that arrives while a turn runs (from any
// attached connection) waits in a FIFO queue of at most
// Config.PromptQueue, and starts when the running turn has ended; beyond
// that it is refused. session/cancel cancels the running turn and answers
// every queued prompt cancelled. The queue lives in the session actor's
// memory only: a restart or a pod's death loses it (its prompts were never
// answered, so their clients see the connection end without an answer).

// DefaultPromptQueue is the default of Config.PromptQueue.
const DefaultPromptQueue = 8

// promptQueue holds the prompts waiting for the running turn.
type promptQueue struct {
	waiting []*sessionRequest
	// starting: the prompt being started came from the queue (its
	// user_message_chunk goes to every client, see echoPrompt).
	starting bool
}

func (q *promptQueue) empty() bool { return len(q.waiting) == 0 }

// enqueuePrompt keeps r for after the running turn, or refuses it when the
// queue is full.
func (s *session) enqueuePrompt(ctx actor.Context, r *sessionRequest) {
	limit := s.deps.Config.PromptQueue
	if len(s.queue.waiting) >= limit {
		s.respondTo(ctx, r.conn, r.id, nil, protocol.ErrLimit(fmt.Sprintf(
			"The prompt queue of this session is full (%d prompts wait for the running turn; IAC_CODE_PROMPT_QUEUE); "+
				"wait for a turn to end or cancel with session/cancel", limit), "prompt_queue_full", limit))
		return
	}
	s.queue.waiting = append(s.queue.waiting, r)
	s.inHand.handedOff(r)
}

// startQueued starts the next queued prompt once no turn runs (a prompt
// that is answered at once, such as /clear or a refused one, lets the
// following one start too).
func (s *session) startQueued(ctx actor.Context) {
	for s.turnFree() && !s.queue.empty() {
		r := s.queue.waiting[0]
		s.queue.waiting[0] = nil
		s.queue.waiting = s.queue.waiting[1:]
		s.queue.starting = true
		s.prompt(ctx, r)
		s.queue.starting = false
	}
}

// cancelledPrompt is the answer of a prompt cancelled before its turn ran.
func cancelledPrompt() protocol.PromptResponse {
	return protocol.PromptResponse{StopReason: protocol.StopCancelled, Usage: promptUsage(llm.Usage{})}
}

// cancelQueued answers queued prompts cancelled: those of conn (every one
// when conn is nil), or only the one with requestID.
func (s *session) cancelQueued(ctx actor.Context, conn *actor.PID, requestID protocol.RawMessage) {
	kept := s.queue.waiting[:0]
	for _, r := range s.queue.waiting {
		if cancels(r, conn, requestID) {
			s.answerCancelled(ctx, r)
			continue
		}
		kept = append(kept, r)
	}
	clear(s.queue.waiting[len(kept):])
	s.queue.waiting = kept
}

// cancels reports whether a cancel of conn's prompts (every connection's
// when conn is nil), or of the one with requestID, is one of prompt r.
func cancels(r *sessionRequest, conn *actor.PID, requestID protocol.RawMessage) bool {
	return (conn == nil || conn.Equal(r.conn)) && cancelsID(requestID, r.id)
}

// cancelsID reports whether a cancel of the request with requestID (of
// every one, when nil) is one of the request with id: the ids are compared
// as read (protocol.IDKey), not as spelled, so "\u0061" cancels "a".
func cancelsID(requestID, id protocol.RawMessage) bool {
	if requestID == nil {
		return true
	}
	key := protocol.IDKey(requestID)
	return key != "" && key == protocol.IDKey(id)
}

// answerCancelled answers prompt r, which never started, cancelled.
func (s *session) answerCancelled(ctx actor.Context, r *sessionRequest) {
	s.respondTo(ctx, r.conn, r.id, cancelledPrompt(), nil)
}

// echoPrompt shows a starting prompt to every attached client as
// user_message_chunk updates, when some of them did not type it: several
// are attached, or it waited in the queue (its sender saw other turns in
// between). A session with one client and no queue says nothing new.
func (s *session) echoPrompt(ctx actor.Context, user *llm.Message, expanded bool) {
	if s.clients.len() < 2 && !s.queue.starting && !expanded {
		// a client following the session here later is shown it
		for _, u := range replayUpdates(user, user.ID) {
			if s.followers.on {
				s.followers.keep(s.updateFrame(u))
			}
		}
		return
	}
	for _, u := range replayUpdates(user, user.ID) {
		s.emit(ctx, u)
	}
}
