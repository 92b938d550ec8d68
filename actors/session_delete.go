package actors

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
)

// deleteSession handles session/delete: the session's files or rows go,
// with the large tool outputs its history points to. A session live on this
// connection is closed first (its running turn ends cancelled): the request
// waits, deferred, until the actor is gone, and then runs again; other
// connections attached to it are told and let go first (see
// session.endForDelete). Unknown or
// another person's: -32002, as for every other session request.
func (c *connection) deleteSession(ctx actor.Context, m *protocol.Message) {
	var ref protocol.SessionIDParams
	if err := protocol.Unmarshal(m.Params, &ref); err != nil || ref.SessionID == "" {
		c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"sessionId": "sessionId is required"}))
		return
	}
	id := ref.SessionID
	if c.deferIfBusy(id, m) {
		return
	}
	if r := c.sessions.get(id); r != nil && r.live != nil {
		pid := r.live
		r.stopping, r.live, r.sent, r.known, r.servers = pid, nil, 0, false, nil
		// The session ends for every connection attached to it, not only
		// this one (as a close would): its files are going.
		ctx.Send(pid, &sessionRequest{method: protocol.MethodSessionDelete, conn: ctx.Self()}) // no id: no answer
		c.sessions.postpone(id, m)
		return
	}
	c.checkOwner(ctx, id, func(ctx actor.Context, owned bool) {
		if !owned {
			// Unknown, or another person's: the same answer.
			c.fail(m.ID, protocol.ErrSessionNotFound(id))
			return
		}
		c.deleteOwned(ctx, m, id)
	})
}

// deleteOwned goes on with deleteSession once the session, not live on this
// connection, is known to be the caller's.
func (c *connection) deleteOwned(ctx actor.Context, m *protocol.Message, id string) {
	r := c.sessions.of(id)
	if name := sessionActorName(id); !r.deletingLive {
		if _, live := ctx.ActorSystem().ProcessRegistry.GetLocal(name); live {
			// Live on other connections only: it ends for them first (they
			// are told), then this request runs again.
			pid := actor.NewPID(ctx.ActorSystem().Address(), name)
			r.deletingLive, r.stopping = true, pid
			ctx.Watch(pid)
			ctx.Send(pid, &deleteLive{})
			c.sessions.postpone(id, m)
			return
		}
	}
	r.deletingLive, r.known, r.servers, r.moved = false, false, nil, false
	c.sessions.tidy(id)
	self, root, st, home, reqID, log := ctx.Self(), ctx.ActorSystem().Root, c.deps.Store, c.deps.Config.Home, m.ID, c.log
	c.answering++
	go func() {
		frame := protocol.EncodeResult(reqID, struct{}{})
		if e := deleteStored(st, home, id); e != nil {
			if e.Code == protocol.CodeInternalError {
				log.Error().Str("session", id).Interface("error", e.Data).Msg("delete session")
			}
			frame = protocol.EncodeError(reqID, e)
		}
		root.Send(self, &offActorAnswer{frame: Frame{Data: frame}})
	}()
}

// deleteStored removes session id from the store, then the spilled tool
// outputs its history names. The history is read first (Open), so the
// files to remove are known before the session is gone.
func deleteStored(st store.Store, home, id string) *protocol.Error {
	sess, entries, err := st.Open(id)
	if err != nil {
		return deleteError(id, err)
	}
	var outputs []string
	if !sharesHistory(st, sess.Meta()) {
		outputs = spilledOutputs(home, entries)
	}
	if err := sess.Close(); err != nil {
		return deleteError(id, err)
	}
	if err := st.Delete(id); err != nil {
		return deleteError(id, err)
	}
	for _, p := range outputs {
		_ = os.Remove(p) // gone already is fine
	}
	return nil
}

// sharesHistory reports whether another session may name the same spilled
// outputs: a fork copies its source's history, so neither a fork nor a
// session forked from keeps its outputs to itself. When the store cannot
// say, it is assumed to (an output kept is better than one lost).
func sharesHistory(st store.Store, m store.Meta) bool {
	if m.ForkedFrom != "" {
		return true
	}
	for cursor := ""; ; {
		metas, next, err := st.List("", cursor, 500)
		if err != nil {
			return true
		}
		for i := range metas {
			if metas[i].ForkedFrom == m.ID {
				return true
			}
		}
		if next == "" {
			return false
		}
		cursor = next
	}
}

func deleteError(id string, err error) *protocol.Error {
	var inUse *store.InUseError
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalidID):
		return protocol.ErrSessionNotFound(id)
	case errors.As(err, &inUse):
		return protocol.ErrSessionInUse(id, inUse.PID, inUse.Owner)
	}
	return protocol.ErrInternal("cannot delete the session: "+err.Error(), newErrorID())
}

// spilledName is the name tools.Bound gives a saved output.
var spilledName = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.txt`)

// spilledOutputs are the files of <home>/tool-outputs that the history's
// messages name. Only a name of the form Bound makes, in that directory,
// is ever returned: a path a model wrote elsewhere is not a file of ours.
func spilledOutputs(home string, entries []store.Entry) []string {
	if home == "" {
		return nil
	}
	dir := filepath.Join(home, tools.SpillDir)
	mention := regexp.MustCompile(regexp.QuoteMeta(dir+string(filepath.Separator)) + `(` + spilledName.String() + `)`)
	seen := map[string]bool{}
	var out []string
	for _, e := range entries {
		for _, b := range e.Message.Content {
			for _, m := range mention.FindAllStringSubmatch(b.Text, -1) {
				if p := filepath.Join(dir, m[1]); !seen[p] {
					seen[p] = true
					out = append(out, p)
				}
			}
		}
	}
	return out
}
