package acpserver

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/transport/auth"
)

// Token budget settings: the default budget of every principal.
const (
	envTokensPerDay   = "IAC_CODE_USER_TOKENS_PER_DAY"
	envTokensPerMonth = "IAC_CODE_USER_TOKENS_PER_MONTH"
)

// budgetOf is principal's token budget: the server's default, each period
// overridden by the principal's own limit from the tokens file or its JWT.
func budgetOf(def store.Budget, chain *auth.Chain, principal string) store.Budget {
	b := def
	l := chain.LimitsOf(principal)
	if l.TokensPerDay != nil {
		b.PerDay = *l.TokensPerDay
	}
	if l.TokensPerMonth != nil {
		b.PerMonth = *l.TokensPerMonth
	}
	return b
}

// tokenMetrics are the model's token counts per principal and model, on
// /metrics.
type tokenMetrics struct {
	tokens *prometheus.CounterVec
	calls  *prometheus.CounterVec
}

func newTokenMetrics() *tokenMetrics {
	return &tokenMetrics{
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "iaccode_model_tokens_total",
			Help: "Tokens of model calls by principal, model and type (input includes cached input; output includes thinking)."},
			[]string{"principal", "model", "type"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "iaccode_model_calls_total",
			Help: "Model calls that reported usage, by principal and model."}, []string{"principal", "model"}),
	}
}

func (m *tokenMetrics) observe(principal, model string, u llm.Usage) {
	m.calls.WithLabelValues(principal, model).Inc()
	for _, t := range []struct {
		typ string
		n   int64
	}{{"input", u.InputTokens}, {"output", u.OutputTokens}, {"thought", u.ThoughtTokens},
		{"cached_read", u.CachedReadTokens}, {"cached_write", u.CachedWriteTokens}} {
		if t.n > 0 {
			m.tokens.WithLabelValues(principal, model, t.typ).Add(float64(t.n))
		}
	}
}

func (m *tokenMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.tokens, m.calls}
}

// newLedger counts tokens in the session store and holds principals to
// their budgets (none when the store cannot count).
func newLedger(cfg settings, sessions store.Backend, met *tokenMetrics) *actors.Ledger {
	counter, ok := sessions.(store.UsageCounter)
	if !ok {
		return nil
	}
	def, chain := cfg.budget, cfg.auth
	return &actors.Ledger{Counter: counter, Observe: met.observe,
		Budget: func(principal string) store.Budget { return budgetOf(def, chain, principal) }}
}

// usageCommand is `iac-code usage`.
const usageCommand = "usage"

// usageMain prints the token usage per principal and model from the store
// (IAC_CODE_STORE_URL, or the files under IAC_CODE_HOME). It returns the
// exit code.
func usageMain(name string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(usageCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	since := fs.String("since", "", "from this UTC day on: a date (2026-12-01), an RFC 3339 time, or a duration back from now (24h, 720h); default the start of this month")
	asJSON := fs.Bool("json", false, "print JSON: {since, usage: [{principal, model, calls, inputTokens, …}]}")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	now := time.Now()
	from, err := parseSince(*since, now)
	if err != nil {
		fmt.Fprintf(stderr, "%s usage: --since: %v\n", name, err)
		return 2
	}
	home, err := homeDir(os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, name+":", err)
		return 1
	}
	st, err := store.OpenFromEnv(home, os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, name+": session store:", err)
		return 1
	}
	defer st.Close()
	counter, ok := st.(store.UsageCounter)
	if !ok {
		fmt.Fprintln(stderr, name+": this store does not count usage")
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := counter.UsageSince(ctx, from)
	if err != nil {
		fmt.Fprintln(stderr, name+":", err)
		return 1
	}
	if *asJSON {
		if rows == nil {
			rows = []store.UsageTotal{}
		}
		out, err := protocol.Marshal(map[string]any{"since": store.DayOf(from).Format(time.RFC3339), "usage": rows})
		if err != nil {
			fmt.Fprintln(stderr, name+":", err)
			return 1
		}
		fmt.Fprintln(stdout, string(out))
		return 0
	}
	fmt.Fprintf(stdout, "Token usage since %s (UTC)\n", store.DayOf(from).Format("2006-01-02"))
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "PRINCIPAL\tMODEL\tCALLS\tINPUT\tOUTPUT\tCACHED READ\tTOTAL\t")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t\n", r.Principal, r.Model, r.Calls, r.InputTokens, r.OutputTokens,
			r.CachedReadTokens, r.Tokens())
	}
	_ = w.Flush()
	return 0
}

// parseSince reads --since: "" is the start of this UTC month.
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return store.MonthOf(now), nil
	}
	if d, err := time.Parse("2006-01-02", v); err == nil {
		return d, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 { // days
		return now.AddDate(0, 0, -n), nil
	}
	return time.Time{}, fmt.Errorf("want a date (2026-12-01), an RFC 3339 time or a duration (24h), got %q", v)
}
