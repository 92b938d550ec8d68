package actors

import (
	"errors"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// Messages of the session actor about its store entry and lease.
type (
	// compacted replaces all but the last keep context messages by a summary.
	compacted struct {
		summary string
		keep    int
	}
	// handOff asks the session to let go of its store lease for another
	// process (Server.HandOff); answered with handedOff once it did.
	handOff   struct{}
	handedOff struct{}
	// sessionLeft tells the session's connection that it went to another
	// process.
	sessionLeft struct {
		id  string
		pid *actor.PID
	}
	// leftHeard answers sessionLeft: conn passes nothing more on to the
	// session's actor, which may stop (session.heard).
	leftHeard struct{ conn *actor.PID }
	// leftUnheard: the wait for leftHeard is over (leftHearingWait).
	leftUnheard struct{}
	// attachAgain gives a connection back its attach that reached the
	// session's actor as it stopped, once it is gone: the connection opens
	// the session anew for it.
	attachAgain struct {
		id     string
		attach *attach
	}
	// sessionGone follows a session actor's Terminated in its connection's
	// mailbox, behind what the actor sent before it stopped: the attaches
	// sent to it that it did not take are opened anew, and a drain no longer
	// waits for it (sessionRecord.settling).
	sessionGone struct {
		id      string
		untaken []*attachRequest
	}
	// attachTaken tells the connection that sent an attach that the
	// session's actor took it: it answers it (connection.attaching).
	attachTaken struct {
		id    string
		reqID protocol.RawMessage
	}
	// attachHeld follows attachTaken when the actor took the attach once
	// stopped: it gives it back once gone (attachAgain), and the
	// connection's drain waits for it meanwhile.
	attachHeld struct {
		id    string
		reqID protocol.RawMessage
	}
)

func (*sessionLeft) IgnoreDeadLetterLogging() {}
func (*leftHeard) IgnoreDeadLetterLogging()   {}
func (*leftUnheard) IgnoreDeadLetterLogging() {}
func (*attachAgain) IgnoreDeadLetterLogging() {}
func (*attachTaken) IgnoreDeadLetterLogging() {}
func (*attachHeld) IgnoreDeadLetterLogging()  {}

// storeError is the client's view of a store failure to open a session:
// held by another process, gone, out of descriptors, or internal (logged
// with the error id).
func (s *session) storeError(err error, what string) *protocol.Error {
	var inUse store.InUseError
	if e := (*store.InUseError)(nil); errors.As(err, &e) {
		inUse = *e
	}
	switch {
	case errors.Is(err, store.ErrFenced):
		s.log.Warn().Err(err).Msg(what + ": taken over by another process")
		return protocol.ErrSessionTakenOver(s.id, inUse.PID, inUse.Owner)
	case errors.Is(err, store.ErrInUse):
		s.log.Info().Int("holder_pid", inUse.PID).Str("holder", inUse.Owner).Bool("turn", inUse.Turn).Msg("session is open in another process")
		if inUse.Turn {
			return protocol.ErrSessionTurnElsewhere(s.id, inUse.PID)
		}
		return protocol.ErrSessionInUse(s.id, inUse.PID, inUse.Owner)
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalidID):
		if s.start == startFork {
			return protocol.ErrSessionNotFound(s.forkSrc)
		}
		return protocol.ErrSessionNotFound(s.id)
	case isFDExhaustion(err):
		s.log.Warn().Err(err).Msg(what + ": out of file descriptors")
		return protocol.ErrLimit("The server is out of file descriptors; try again shortly", "file_descriptors", 0)
	}
	errorID := newErrorID()
	s.log.Error().Err(err).Str("error_id", errorID).Msg(what)
	return protocol.ErrInternal(what+": "+err.Error(), errorID)
}

// isFDExhaustion reports EMFILE/ENFILE: a load condition, not a bug.
func isFDExhaustion(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// markTurn records in the store whether a turn runs here, and which
// (store.TurnRecorder): the session lists of other processes and pods show
// it; the file store's lock says so too (store.TurnMarker), so another
// process asking for the session fails at once, naming this one, instead
// of waiting for it to let go. One synchronous write at the turn's start
// and one at its end, like the history's appends around them; a fenced
// handle is refused it (writeFailed).
func (s *session) markTurn(running bool) {
	if !s.lease.writable() || s.store == nil {
		return
	}
	m, ok := s.store.(store.TurnRecorder)
	if !ok {
		return
	}
	var turn *store.RunningTurn
	if running && s.turn.soFar.active != nil {
		turn = s.turn.soFar.active.record()
		turn.MCPServers = s.mcpServerNames()
	}
	if err := m.RecordTurn(turn); err != nil {
		s.writeFailed(err, "record the running turn")
	}
}

// adoptMeta takes the store's metadata, with mode and model made valid here.
// A history without its title (the process was killed during the first
// turn, before the turn's metadata write) gets it back from its first
// prompt; it is written with the next change.
func (s *session) adoptMeta() {
	s.meta = s.store.Meta()
	if !validMode(s.meta.Mode) {
		s.meta.Mode = "default"
	}
	if !s.validModel(s.meta.Model) {
		s.meta.Model = s.deps.llmConfig().Model
	}
	if s.meta.Title == "" {
		for i := range s.entries {
			if e := &s.entries[i]; e.Kind == store.KindMessage && e.Message.Role == llm.RoleUser {
				if s.meta.Title = store.TitleFrom(e.Message.FirstText()); s.meta.Title != "" {
					s.metaDirty = true
					break
				}
			}
		}
	}
}

// saveMeta persists s.meta now (nothing once fenced: see writeFailed).
func (s *session) saveMeta() {
	if s.lease.fenced != nil {
		return
	}
	if err := s.store.SaveMeta(s.meta); err != nil {
		s.writeFailed(err, "save session metadata")
		return
	}
	s.meta = s.store.Meta()
	s.metaDirty = false
}

// changeMeta persists a change of s.meta: at once when no turn runs, else
// at the turn's end (endTurn writes the metadata once per turn anyway).
// What is durable when: the history's lines at every message (fsynced at
// the turn's end); the metadata at the turn's end, or at once for a change
// made between turns.
func (s *session) changeMeta() {
	s.metaDirty = true
	if !s.turn.running() {
		s.saveMeta()
	}
}

// flushMeta writes a change still pending (a session closed or released).
func (s *session) flushMeta() {
	if s.metaDirty {
		s.saveMeta()
	}
}

// record appends a completed message to the history, on disk at once.
func (s *session) record(ctx actor.Context, msg llm.Message) {
	s.append(store.MessageEntry(msg))
	if s.meta.Title == "" && msg.Role == llm.RoleUser {
		if title := store.TitleFrom(msg.FirstText()); title != "" {
			// Written with the turn this prompt starts, at its end.
			s.meta.Title, s.meta.UpdatedAt, s.metaDirty = title, time.Now().UTC(), true
			if s.lease.fenced != nil {
				return
			}
			s.emit(ctx, protocol.SessionInfoUpdate{SessionUpdate: protocol.UpdateSessionInfo, Title: title,
				UpdatedAt: s.meta.UpdatedAt.Format(time.RFC3339)})
		}
	}
}

// recordToolStarts writes the start records of the calls the turn is about
// to run, in one append, and tells the turn (from) it may run them; a
// fenced session does not: its turn is cancelled (stopWriting).
func (s *session) recordToolStarts(ctx actor.Context, m *toolsStarting, from *actor.PID) {
	if s.lease.fenced != nil || !s.turn.running() {
		return
	}
	entries := make([]store.Entry, len(m.ids))
	for i := range m.ids {
		entries[i] = store.ToolStartEntry(m.ids[i], m.names[i])
	}
	if err := s.store.Append(entries...); err != nil {
		s.writeFailed(err, "append to session history")
		if s.lease.fenced != nil {
			return
		}
	}
	s.entries = append(s.entries, entries...)
	if from != nil {
		ctx.Send(from, &toolsStartRecorded{})
	}
}

// append adds e to the history, in the store unless fenced.
func (s *session) append(e store.Entry) {
	entries := []store.Entry{e}
	if s.lease.fenced == nil {
		if err := s.store.Append(entries...); err != nil {
			s.writeFailed(err, "append to session history")
		}
	}
	s.entries = append(s.entries, entries[0])
}

// closeStore lets go of the session in the store for good (Close is
// idempotent): before session/close is answered, so that another process
// can load the session as soon as the client hears it is closed.
func (s *session) closeStore() {
	s.flushMeta()
	if err := s.store.Close(); err != nil {
		s.log.Error().Err(err).Msg("close session store")
	}
}

func (s *session) syncStore() {
	if s.lease.fenced != nil {
		return
	}
	if err := s.store.Sync(); err != nil {
		s.writeFailed(err, "sync session history")
	}
}

// compacted stores a compaction: the summary stands for every context
// message but the last m.keep from now on; the full history stays on disk.
func (s *session) compacted(m *compacted) {
	// The seq of each context message's last entry: the tool results of a
	// step, recorded one by one, are one message (store.Context).
	var ctxSeqs []int64
	folding := false
	for _, e := range s.entries {
		switch {
		case e.Kind == store.KindCompaction:
			ctxSeqs, folding = ctxSeqs[:0], false
		case e.Kind == store.KindToolStart:
		case e.Kind == store.KindToolResult || folding && e.Message.Role == llm.RoleTool:
			if folding {
				ctxSeqs[len(ctxSeqs)-1] = e.Seq
			} else {
				ctxSeqs, folding = append(ctxSeqs, e.Seq), true
			}
		default:
			ctxSeqs, folding = append(ctxSeqs, e.Seq), false
		}
	}
	cut := len(ctxSeqs) - m.keep - 1
	if cut < 0 {
		return
	}
	s.append(store.CompactionEntry(m.summary, ctxSeqs[cut]))
}
