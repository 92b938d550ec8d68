package actors

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// ownerChecked is the answer of the store read started by checkOwner.
type ownerChecked struct {
	id    string
	owned bool
}

func (*ownerChecked) IgnoreDeadLetterLogging() {}

// checkOwner reads whether the connection's principal owns stored session
// id off the actor's goroutine (a Stat is a database query in cluster
// mode: one slow round trip must not hold every other frame of the
// connection), then runs then on the actor with the answer. Until it runs,
// every request naming id waits (deferIfBusy), so they keep their order.
// A session of someone else is, to the caller, one that does not exist:
// then answers protocol.ErrSessionNotFound either way. At most
// maxOwnerReads reads of a connection run at once; the others wait their
// turn, in order (a client pipelining loads of made-up ids must not take
// the whole shared database pool).
func (c *connection) checkOwner(ctx actor.Context, id string, then func(ctx actor.Context, owned bool)) {
	c.sessions.of(id).checking = then
	if c.reading >= maxOwnerReads {
		c.readQueue = append(c.readQueue, id)
		return
	}
	c.readOwner(ctx, id)
}

// maxOwnerReads bounds the owner reads (store Stat) of one connection
// under way at once.
const maxOwnerReads = 4

func (c *connection) readOwner(ctx actor.Context, id string) {
	c.reading++
	self, root, st, log, who := ctx.Self(), ctx.ActorSystem().Root, c.deps.Store, c.log, c.who
	go func() {
		root.Send(self, &ownerChecked{id: id, owned: owns(st, log, who, id)})
	}()
}

// ownerKnown runs what waited for the answer about m.id, then the requests
// for that session deferred meanwhile, in the order they came.
func (c *connection) ownerKnown(ctx actor.Context, m *ownerChecked) {
	c.reading--
	if len(c.readQueue) > 0 {
		next := c.readQueue[0]
		c.readQueue = c.readQueue[1:]
		c.readOwner(ctx, next)
	}
	r := c.sessions.get(m.id)
	if r == nil || r.checking == nil {
		return
	}
	then := r.checking
	r.checking = nil
	waiting := c.sessions.takeDeferred(m.id)
	then(ctx, m.owned)
	for _, w := range waiting {
		c.dispatch(ctx, w) // deferred again, after what then deferred, while still busy
	}
	c.joinDrain(ctx)
	c.finishDrain(ctx)
}

// owns reports whether who owns stored session id. It reads the stored
// meta only (no lock, no lease), so a refused load never disturbs the
// owner's session, on this process or on another pod.
func owns(st store.Store, log zerolog.Logger, who Identity, id string) bool {
	meta, err := st.Stat(id)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			log.Warn().Err(err).Str("session", id).Msg("cannot read the session's owner")
		}
		return false
	}
	if meta.OwnedBy() != who.Principal {
		log.Info().Bool("audit", true).Str("principal", who.Principal).Str("remote", who.Remote).
			Str("session", id).Str("outcome", "not_owner").Msg("another user's session refused as not found")
		return false
	}
	return true
}

// workspaceCwd checks a session's cwd: an absolute existing directory and,
// with a workspace root (IAC_CODE_WORKSPACE_ROOT, "{user}" replaced by the
// principal), inside that root once symlinks and ".." are resolved. It
// returns the directory the session will use: the resolved one under a
// workspace root (the decision is made on the value used), cwd as given
// otherwise.
func (c *connection) workspaceCwd(cwd string) (string, *protocol.Error) {
	if bad := checkCwd(cwd); bad != "" {
		return "", protocol.ErrInvalidParams(map[string]string{"cwd": bad})
	}
	pattern := c.deps.Config.WorkspaceRoot
	if pattern == "" {
		return cwd, nil
	}
	root := strings.ReplaceAll(pattern, "{user}", c.who.Principal)
	outside := func() *protocol.Error {
		return protocol.NewError(protocol.CodeInvalidParams,
			"cwd must be inside your workspace root "+root+" (IAC_CODE_WORKSPACE_ROOT)",
			map[string]string{"cwd": "outside the workspace root", "workspaceRoot": root})
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", outside()
	}
	real, err := filepath.EvalSymlinks(cwd)
	if err != nil {
		return "", outside()
	}
	rel, err := filepath.Rel(realRoot, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", outside()
	}
	return real, nil
}

// userTurns counts the running turns of each principal, over all its
// connections and sessions of this process (MaxTurnsPerUser).
type userTurns struct {
	mu sync.Mutex
	n  map[string]int
}

// acquire counts a turn of user unless it runs limit already (limit <= 0:
// no limit).
func (u *userTurns) acquire(user string, limit int) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if limit > 0 && u.n[user] >= limit {
		return false
	}
	if u.n == nil {
		u.n = map[string]int{}
	}
	u.n[user]++
	return true
}

func (u *userTurns) release(user string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n[user] <= 1 {
		delete(u.n, user)
	} else {
		u.n[user]--
	}
}

// errTooManyTurns answers a prompt beyond MaxTurnsPerUser.
func errTooManyTurns(limit int) *protocol.Error {
	return protocol.ErrLimit(fmt.Sprintf(
		"Too many running prompts for this user (limit %d, IAC_CODE_MAX_TURNS_PER_USER); wait for one to finish or cancel it", limit),
		"too_many_turns", limit)
}

// audit starts an audit line (one per session lifecycle event and
// permission decision): who, from where, on which connection and session.
// It never carries a credential: the actors never see one.
func (s *session) audit(method, outcome string) *zerolog.Event {
	return s.log.Info().Bool("audit", true).Str("principal", s.owner).Str("conn", s.who.connID).
		Str("remote", s.who.Remote).Str("method", method).Str("outcome", outcome)
}

// sessionWho is the connection a session serves now, for its audit lines.
type sessionWho struct {
	Identity
	connID string
	// client is the id of the connection the client is on, which its
	// prompts belong to wherever the session goes (promptKey): connID, or
	// for a proxy its stub's connection on the other pod ("" when unknown).
	client string
}

// sessionWho is who c is to a session.
func (c *connection) sessionWho() sessionWho {
	client := c.id
	if c.stub != nil {
		client = c.stub.conn
	}
	return sessionWho{Identity: c.who, connID: c.id, client: client}
}

// startMethod names the request of a start kind in audit lines.
func startMethod(k startKind) string {
	switch k {
	case startNew:
		return protocol.MethodSessionNew
	case startLoad:
		return protocol.MethodSessionLoad
	case startResume:
		return protocol.MethodSessionResume
	case startFork:
		return protocol.MethodSessionFork
	}
	return "restore"
}
