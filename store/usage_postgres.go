package store

import (
	"context"
	"time"

	"github.com/iac-code/iac-code/llm"
)

var _ UsageCounter = (*PGStore)(nil)

// AddUsage implements UsageCounter: one upsert of the day's row.
func (s *PGStore) AddUsage(ctx context.Context, principal, model string, at time.Time, u llm.Usage) error {
	ctx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	_, err := s.pool.Exec(ctx, `INSERT INTO iac_token_usage AS t (principal, day, model, calls, input_tokens,
		output_tokens, thought_tokens, cached_read_tokens, cached_write_tokens)
		VALUES ($1, $2, $3, 1, $4, $5, $6, $7, $8)
		ON CONFLICT (principal, day, model) DO UPDATE SET calls = t.calls + 1,
			input_tokens = t.input_tokens + EXCLUDED.input_tokens,
			output_tokens = t.output_tokens + EXCLUDED.output_tokens,
			thought_tokens = t.thought_tokens + EXCLUDED.thought_tokens,
			cached_read_tokens = t.cached_read_tokens + EXCLUDED.cached_read_tokens,
			cached_write_tokens = t.cached_write_tokens + EXCLUDED.cached_write_tokens`,
		principal, DayOf(at), model, u.InputTokens, u.OutputTokens, u.ThoughtTokens, u.CachedReadTokens, u.CachedWriteTokens)
	return s.dbErr("count token usage", err)
}

// TokensUsed implements UsageCounter: one indexed query over the month's rows.
func (s *PGStore) TokensUsed(ctx context.Context, principal string, at time.Time) (day, month int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	err = s.pool.QueryRow(ctx, `SELECT
			coalesce(sum(input_tokens + output_tokens) FILTER (WHERE day = $2), 0)::bigint,
			coalesce(sum(input_tokens + output_tokens), 0)::bigint
		FROM iac_token_usage WHERE principal = $1 AND day >= $3 AND day <= $2`,
		principal, DayOf(at), MonthOf(at)).Scan(&day, &month)
	return day, month, s.dbErr("read token usage", err)
}

// UsageSince implements UsageCounter.
func (s *PGStore) UsageSince(ctx context.Context, since time.Time) ([]UsageTotal, error) {
	ctx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT principal, model, sum(calls)::bigint, sum(input_tokens)::bigint,
			sum(output_tokens)::bigint, sum(thought_tokens)::bigint, sum(cached_read_tokens)::bigint,
			sum(cached_write_tokens)::bigint
		FROM iac_token_usage WHERE day >= $1 GROUP BY principal, model ORDER BY principal, model`, DayOf(since))
	if err != nil {
		return nil, s.dbErr("read token usage", err)
	}
	defer rows.Close()
	var out []UsageTotal
	for rows.Next() {
		var t UsageTotal
		if err := rows.Scan(&t.Principal, &t.Model, &t.Calls, &t.InputTokens, &t.OutputTokens, &t.ThoughtTokens,
			&t.CachedReadTokens, &t.CachedWriteTokens); err != nil {
			return nil, s.dbErr("read token usage", err)
		}
		out = append(out, t)
	}
	return out, s.dbErr("read token usage", rows.Err())
}
