package store

import (
	"context"
	"time"

	"github.com/iac-code/iac-code/llm"
)

// UsageCounter counts the tokens each principal's model calls used, per
// model and UTC day, for token budgets and `iac-code usage`. The shared
// store counts across every process on the database; the file store across
// the processes of one home. Both pass one contract test suite.
type UsageCounter interface {
	// AddUsage counts one model call of principal with model, on at's UTC day.
	AddUsage(ctx context.Context, principal, model string, at time.Time, u llm.Usage) error
	// TokensUsed is principal's token count (BudgetTokens) on at's UTC day
	// and in at's UTC calendar month up to and including that day.
	TokensUsed(ctx context.Context, principal string, at time.Time) (day, month int64, err error)
	// UsageSince is the usage per principal and model from since's UTC day
	// on, sorted by principal then model.
	UsageSince(ctx context.Context, since time.Time) ([]UsageTotal, error)
}

// UsageTotal is the usage of one principal with one model over a period.
type UsageTotal struct {
	Principal string `json:"principal"`
	Model     string `json:"model"`
	// Calls counts model calls.
	Calls int64 `json:"calls"`
	Usage
}

// Tokens is what a budget counts of u.
func (u UsageTotal) Tokens() int64 { return u.InputTokens + u.OutputTokens }

// BudgetTokens is what a token budget counts of one call: every prompt
// token (cached ones included) and every output token (thinking included),
// the context the call used.
func BudgetTokens(u llm.Usage) int64 { return u.InputTokens + u.OutputTokens }

// Budget caps a principal's tokens per UTC day and per UTC calendar month;
// 0 leaves that period uncapped.
type Budget struct {
	PerDay   int64 `json:"perDay,omitempty"`
	PerMonth int64 `json:"perMonth,omitempty"`
}

// Limited reports whether any period is capped.
func (b Budget) Limited() bool { return b.PerDay > 0 || b.PerMonth > 0 }

// Budget periods (BudgetState.Period).
const (
	PeriodDay   = "day"
	PeriodMonth = "month"
)

// BudgetState is a budget measured against what was used.
type BudgetState struct {
	// Over: a capped period is used up; Period names it ("day" or "month";
	// both: the one that resets last), Limit and Used are its figures, and
	// ResetAt is when the principal can use the model again.
	Over    bool
	Period  string
	Limit   int64
	Used    int64
	ResetAt time.Time
}

// Check measures b against the tokens used on now's UTC day and month.
func (b Budget) Check(day, month int64, now time.Time) BudgetState {
	var st BudgetState
	if b.PerDay > 0 && day >= b.PerDay {
		st = BudgetState{Over: true, Period: PeriodDay, Limit: b.PerDay, Used: day, ResetAt: NextDay(now)}
	}
	if b.PerMonth > 0 && month >= b.PerMonth {
		// The month resets at a day's end too, never before the day does.
		st = BudgetState{Over: true, Period: PeriodMonth, Limit: b.PerMonth, Used: month, ResetAt: NextMonth(now)}
	}
	return st
}

// DayOf is the start (00:00 UTC) of t's UTC day.
func DayOf(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// MonthOf is the start of t's UTC calendar month.
func MonthOf(t time.Time) time.Time {
	y, m, _ := t.UTC().Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
}

// NextDay is when a daily budget counted at t resets: the next 00:00 UTC.
func NextDay(t time.Time) time.Time { return DayOf(t).AddDate(0, 0, 1) }

// NextMonth is when a monthly budget counted at t resets: 00:00 UTC on the
// first of the next month.
func NextMonth(t time.Time) time.Time { return MonthOf(t).AddDate(0, 1, 0) }
