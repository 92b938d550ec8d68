package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// Ledger counts the tokens of every model call per principal and model
// (Deps.Ledger) and holds each principal to its token budget: a prompt
// over budget is refused before the model is called, and a turn that
// crosses the line stops before its next model call.
type Ledger struct {
	// Counter is where the counts go: the session store, so every process
	// on it shares them.
	Counter store.UsageCounter
	// Budget is a principal's budget; nil or zero: none, and no check
	// costs anything.
	Budget func(principal string) store.Budget
	// Observe, when set, is told every call's usage (metrics).
	Observe func(principal, model string, u llm.Usage)
	// Now is the clock of the counts (nil: time.Now).
	Now func() time.Time
}

func (l *Ledger) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// budgetOf is principal's budget (zero: none).
func (l *Ledger) budgetOf(principal string) store.Budget {
	if l == nil || l.Budget == nil || l.Counter == nil {
		return store.Budget{}
	}
	return l.Budget(principal)
}

// ledgerTimeout bounds one count or check in the store.
const ledgerTimeout = 10 * time.Second

// budgetChecked is the outcome of a turn's budget check.
type budgetChecked struct {
	state store.BudgetState
	err   error
}

func (*budgetChecked) IgnoreDeadLetterLogging() {}

// budgetPhase is where a turn's next model call stands with its budget.
type budgetPhase uint8

const (
	// budgetUnchecked: the next model call needs a check first.
	budgetUnchecked budgetPhase = iota
	// budgetChecking: a check runs; budgetChecked follows.
	budgetChecking
	// budgetPassed: the check passed; the next model call may start.
	budgetPassed
)

// turnBudget is a turn's side of the ledger: it counts each model call's
// usage and, for a principal with a budget, checks the budget before every
// model call.
type turnBudget struct {
	ledger *Ledger
	owner  string
	log    zerolog.Logger
	phase  budgetPhase
	// counted closes once the turn's last count is in the store: a check
	// waits for it, so it sees the turn's own calls.
	counted chan struct{}
}

// admit reports whether a model call may start now. When not, a check has
// started and the actor gets *budgetChecked; a call then comes back here.
func (b *turnBudget) admit(ctx actor.Context) bool {
	budget := b.ledger.budgetOf(b.owner)
	if !budget.Limited() {
		return true
	}
	switch b.phase {
	case budgetPassed:
		b.phase = budgetUnchecked
		return true
	case budgetChecking:
		return false
	}
	b.phase = budgetChecking
	self, root, counted, l, owner := ctx.Self(), ctx.ActorSystem().Root, b.counted, b.ledger, b.owner
	go func() {
		if counted != nil {
			<-counted
		}
		cctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
		defer cancel()
		now := l.now()
		day, month, err := l.Counter.TokensUsed(cctx, owner, now)
		root.Send(self, &budgetChecked{state: budget.Check(day, month, now), err: err})
	}()
	return false
}

// checked takes a check's outcome: the budget state that stops the turn,
// or nil when the model call may go. A check that failed lets it go (the
// model stays usable while the store cannot be read; logged).
func (b *turnBudget) checked(m *budgetChecked) *store.BudgetState {
	b.phase = budgetPassed
	if m.err != nil {
		b.log.Error().Err(m.err).Str("principal", b.owner).Msg("token budget not checked; the model call goes ahead")
		return nil
	}
	if m.state.Over {
		b.phase = budgetUnchecked
		return &m.state
	}
	return nil
}

// turnCounted: the ended turn's usage is in the store (reportEnd).
type turnCounted struct{}

func (*turnCounted) IgnoreDeadLetterLogging() {}

// counting is what closes once the turn's counts are in the store, while
// one is still being written for a principal with a budget; nil otherwise.
func (b *turnBudget) counting() chan struct{} {
	if b.counted == nil || !b.ledger.budgetOf(b.owner).Limited() {
		return nil
	}
	select {
	case <-b.counted:
		return nil
	default:
		return b.counted
	}
}

// count records one model call's usage.
func (b *turnBudget) count(model string, u llm.Usage) {
	l := b.ledger
	if l == nil || u == (llm.Usage{}) {
		return
	}
	if l.Observe != nil {
		l.Observe(b.owner, model, u)
	}
	if l.Counter == nil {
		return
	}
	prev, done := b.counted, make(chan struct{})
	b.counted = done
	owner, log, at := b.owner, b.log, l.now()
	go func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		cctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
		defer cancel()
		if err := l.Counter.AddUsage(cctx, owner, model, at, u); err != nil {
			log.Error().Err(err).Str("principal", owner).Msg("token usage not counted")
		}
	}()
}

// errTokenBudget is the refusal of a prompt over budget.
func errTokenBudget(st *store.BudgetState) *protocol.Error {
	return protocol.ErrTokenBudget(st.Period, st.Limit, st.Used, st.ResetAt.UTC().Format(time.RFC3339))
}

// budgetStopText tells the client why a turn stopped mid-way.
func budgetStopText(st *store.BudgetState) string {
	return fmt.Sprintf("Stopped: the token budget of this %s is used up (%d of %d tokens). It resets at %s.",
		st.Period, st.Used, st.Limit, st.ResetAt.UTC().Format(time.RFC3339))
}
