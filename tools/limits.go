package tools

import "time"

// Limits are the size and time bounds of the built-in tools. A zero field
// means "use the default" (see DefaultLimits), so Limits{} is valid.
type Limits struct {
	// MaxReadBytes caps the file content read_file returns (10 MiB).
	MaxReadBytes int64
	// MaxReadLines caps the lines read_file returns (50,000).
	MaxReadLines int
	// MaxListEntries caps the entries list_files prints (5,000).
	MaxListEntries int
	// MaxGlobResults caps the files glob prints (1,000).
	MaxGlobResults int
	// GrepMaxResults is grep's default max_results (1,000).
	GrepMaxResults int
	// GrepMaxFileBytes: grep skips larger files (64 MiB).
	GrepMaxFileBytes int64
	// GrepWorkers is the size of grep's file worker pool (0 = 4×GOMAXPROCS, between 8 and 64;
	// file reads are syscall-bound, so more workers than cores hide latency).
	GrepWorkers int
	// BashTimeout is the default bash timeout (120 s).
	BashTimeout time.Duration
	// BashMaxTimeout is the largest timeout the model may ask for (600 s).
	BashMaxTimeout time.Duration
	// BashKillGrace is the wait between SIGTERM and SIGKILL to the process group (2 s).
	BashKillGrace time.Duration
	// BashOutputBytes caps what bash keeps of each of stdout and stderr in
	// memory (head and tail are kept; 10 MiB).
	BashOutputBytes int
	// ProgressInterval is the minimum time between two Env.Progress calls (100 ms, i.e. ≤ 10/s).
	ProgressInterval time.Duration
	// MaxOutputChars is the size (in characters) above which Bound spills a
	// result to a file (50,000).
	MaxOutputChars int
	// FetchTimeout bounds a whole web_fetch (30 s).
	FetchTimeout time.Duration
	// FetchMaxBytes caps a web_fetch download (10 MiB).
	FetchMaxBytes int64
	// FetchMaxRedirects caps followed redirects (10).
	FetchMaxRedirects int
}

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{
		MaxReadBytes:      10 << 20,
		MaxReadLines:      50_000,
		MaxListEntries:    5_000,
		MaxGlobResults:    1_000,
		GrepMaxResults:    1_000,
		GrepMaxFileBytes:  64 << 20,
		BashTimeout:       120 * time.Second,
		BashMaxTimeout:    600 * time.Second,
		BashKillGrace:     2 * time.Second,
		BashOutputBytes:   10 << 20,
		ProgressInterval:  100 * time.Millisecond,
		MaxOutputChars:    50_000,
		FetchTimeout:      30 * time.Second,
		FetchMaxBytes:     10 << 20,
		FetchMaxRedirects: 10,
	}
}

// WithDefaults returns l with every zero field replaced by its default.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxReadBytes <= 0 {
		l.MaxReadBytes = d.MaxReadBytes
	}
	if l.MaxReadLines <= 0 {
		l.MaxReadLines = d.MaxReadLines
	}
	if l.MaxListEntries <= 0 {
		l.MaxListEntries = d.MaxListEntries
	}
	if l.MaxGlobResults <= 0 {
		l.MaxGlobResults = d.MaxGlobResults
	}
	if l.GrepMaxResults <= 0 {
		l.GrepMaxResults = d.GrepMaxResults
	}
	if l.GrepMaxFileBytes <= 0 {
		l.GrepMaxFileBytes = d.GrepMaxFileBytes
	}
	if l.BashTimeout <= 0 {
		l.BashTimeout = d.BashTimeout
	}
	if l.BashMaxTimeout <= 0 {
		l.BashMaxTimeout = d.BashMaxTimeout
	}
	if l.BashKillGrace <= 0 {
		l.BashKillGrace = d.BashKillGrace
	}
	if l.BashOutputBytes <= 0 {
		l.BashOutputBytes = d.BashOutputBytes
	}
	if l.ProgressInterval <= 0 {
		l.ProgressInterval = d.ProgressInterval
	}
	if l.MaxOutputChars <= 0 {
		l.MaxOutputChars = d.MaxOutputChars
	}
	if l.FetchTimeout <= 0 {
		l.FetchTimeout = d.FetchTimeout
	}
	if l.FetchMaxBytes <= 0 {
		l.FetchMaxBytes = d.FetchMaxBytes
	}
	if l.FetchMaxRedirects <= 0 {
		l.FetchMaxRedirects = d.FetchMaxRedirects
	}
	return l
}
