package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

// withCaller makes ctx the context of the turn's model requests under a
// shared model limit (llm.Limit): they queue as the turn's owner, and a
// request that has to wait tells the client once, with a thought chunk.
// Without a limit ctx is returned as it is.
func (t *turn) withCaller(ctx context.Context, actx actor.Context) context.Context {
	if t.deps.llmConfig().Limit == nil {
		return ctx
	}
	root, to, sid := actx.ActorSystem().Root, actx.Parent(), t.sessionID
	return llm.WithCaller(ctx, &llm.Caller{Person: t.budget.owner, Waiting: func(w llm.Wait) {
		data := protocol.EncodeNotification(protocol.MethodSessionUpdate, protocol.SessionNotification{SessionID: sid,
			Update: protocol.ChunkUpdate{SessionUpdate: protocol.UpdateAgentThoughtChunk, Content: protocol.Text(waitText(w))}})
		root.Send(to, &outbound{frame: Frame{Data: data, SessionID: sid}})
	}})
}

// waitText is the notice of a model request that waits for the shared limit.
func waitText(w llm.Wait) string {
	if !w.PausedUntil.IsZero() {
		return fmt.Sprintf("Waiting for the model: the provider asked to wait until %s.\n",
			w.PausedUntil.UTC().Format(time.RFC3339))
	}
	switch {
	case w.Ahead == 1:
		return "Waiting for the model: it is busy (shared limit); 1 request ahead.\n"
	case w.Ahead > 1:
		return fmt.Sprintf("Waiting for the model: it is busy (shared limit); %d requests ahead.\n", w.Ahead)
	}
	return "Waiting for the model: it is busy (shared limit).\n"
}
