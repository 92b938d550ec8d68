package actors

import (
	"fmt"
	"runtime/debug"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/protocol"
)

// panicError carries a recovered panic with the stack where it happened.
type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprint(p.value) }

// keepStack re-raises panics of Receive wrapped with their stack, so the
// supervisor can log where the crash happened.
func keepStack(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(*panicError); !ok {
					r = &panicError{value: r, stack: debug.Stack()}
				}
				panic(r)
			}
		}()
		next(c, env)
	}
}

// recovered turns a panic in an actor-owned goroutine into a message for the
// actor: protoactor does not recover goroutines, and a crash there would take
// the whole process down.
func recovered(r any) *panicError {
	if p, ok := r.(*panicError); ok {
		return p
	}
	return &panicError{value: r, stack: debug.Stack()}
}

// childCrashed tells a parent that one of its children panicked; the child
// has been stopped.
type childCrashed struct {
	child  *actor.PID
	reason *panicError
}

// reportAndStop is the strategy for turn and tool children: restarting a
// half-done turn or tool is meaningless, so the child is stopped and its
// parent told, which answers for it (a JSON-RPC error, a failed tool call).
type reportAndStop struct{}

func (reportAndStop) HandleFailure(sys *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason any, _ any) {
	p, ok := reason.(*panicError)
	if !ok {
		p = &panicError{value: reason}
	}
	if self, ok := sup.(interface{ Self() *actor.PID }); ok {
		sys.Root.Send(self.Self(), &childCrashed{child: child, reason: p})
	}
	sup.StopChildren(child)
}

// stopOnCrash is the guardian of session actors: a session that panics is
// logged and stopped (its history is on disk; a later load brings it back)
// rather than restarted with its state reset; the prompt of its turn is
// answered by the session as it panics (session.crashing). protoactor
// registers a guardian actor per distinct strategy value, for good: there
// is one stopOnCrash per server (Deps.sessionGuardian), used by pointer
// (its logger cannot be a map key). One per session spawn was one more
// registered process per session, never freed.
type stopOnCrash struct{ log zerolog.Logger }

func (g *stopOnCrash) HandleFailure(_ *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason any, _ any) {
	ev := g.log.Error().Str("actor", child.Id).Interface("panic", reason)
	if p, ok := reason.(*panicError); ok {
		ev = ev.Interface("panic", p.value).Bytes("stack", p.stack)
	}
	ev.Msg("session crashed; stopped")
	sup.StopChildren(child)
}

// survivePanics keeps a connection actor alive through a bug: restarting it
// would forget that the client initialized and which sessions it has. The
// message that panicked is answered -32603 (when it was a request) and
// logged with its stack; the connection's state is kept.
func survivePanics(log zerolog.Logger, out Outlet) actor.ReceiverMiddleware {
	return func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			defer func() {
				r := recover()
				if r == nil {
					return
				}
				errorID := newErrorID()
				log.Error().Str("error_id", errorID).Interface("panic", r).Bytes("stack", debug.Stack()).Msg("connection actor panicked; message dropped")
				if in, ok := env.Message.(*inbound); ok && in.msg != nil && in.msg.IsRequest() {
					out.Send(Frame{Data: protocol.EncodeError(in.msg.ID, protocol.ErrInternal(fmt.Sprint(r), errorID))})
				}
			}()
			next(c, env)
		}
	}
}
