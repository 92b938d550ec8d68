package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// The session's turn slot: the one running turn, its cancel, its end (the
// prompt's answer, what waited for it) and the owner's running-turn count.

// cancelTurn tells the running turn to end cancelled.
func (s *session) cancelTurn(ctx actor.Context) {
	s.cancelling = true
	ctx.Send(s.turn, &cancelTurn{})
}

func (s *session) endTurn(ctx actor.Context, m *turnFinished) {
	if s.turn == nil {
		return
	}
	s.turn, s.cancelling = nil, false
	s.markTurn(false)
	s.releaseTurnCount()
	s.dropPermissionAsks(ctx)
	var (
		repaired, added []store.Entry
		err             error
	)
	if s.fenced == nil {
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
	switch {
	case s.fenced != nil:
		// Whatever the turn's end: what it did since the takeover is lost.
		s.respondTo(ctx, s.promptConn, s.promptID, nil, s.fenced)
	case m.err != nil:
		s.respondTo(ctx, s.promptConn, s.promptID, nil, m.err)
	default:
		s.respondTo(ctx, s.promptConn, s.promptID, protocol.PromptResponse{StopReason: m.stopReason, Usage: promptUsage(m.usage)}, nil)
	}
	s.promptID, s.promptConn = nil, nil
	s.answerDrainers(ctx)
	if s.phase.lettingGo() {
		s.finishEnding(ctx) // the ending waited for the turn
		return
	}
	s.startQueued(ctx)
}

// releaseTurnCount gives the owner's running-turn slot back (see
// MaxTurnsPerUser), once.
func (s *session) releaseTurnCount() {
	if s.turnCounted {
		s.turnCounted = false
		s.deps.turns.release(s.owner)
	}
}
