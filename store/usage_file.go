package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

// fileUsage is the file store's UsageCounter: <root>/usage/YYYY-MM-DD.jsonl,
// one line per model call, appended with O_APPEND in one write (so the
// processes sharing a home never interleave their lines). Each file is read
// once up to its end and then only from where the last read stopped: a
// budget check costs a stat and the new lines, not the month.
type fileUsage struct {
	dir string
	// made: dir exists (created once per process).
	made atomic.Bool

	// out is the day file last appended to (outName), kept open: a model
	// call's count is one write, not an open, a write and a close.
	// O_APPEND puts each write at the file's end whoever else appends.
	// outPath and outIdent are its path and what that named when opened:
	// a day file removed or moved away meanwhile (an operator resetting
	// the day's counts) is opened anew, not written on unseen.
	outMu    sync.Mutex
	out      *os.File
	outName  string
	outPath  string
	outIdent fileIdent

	mu   sync.Mutex
	days map[string]*usageDay // by file name
}

// usageDay is what has been read of one day's file: the file it was
// (info), up to offset. A file removed or replaced since counts from its
// start again (an operator resetting the day's counts).
type usageDay struct {
	info   os.FileInfo
	offset int64
	totals map[usageKey]*UsageTotal
}

type usageKey struct{ principal, model string }

// usageLine is one model call in a day file.
type usageLine struct {
	Principal string `json:"p"`
	Model     string `json:"m"`
	Input     int64  `json:"in,omitempty"`
	Output    int64  `json:"out,omitempty"`
	Thought   int64  `json:"th,omitempty"`
	CacheRead int64  `json:"cr,omitempty"`
	CacheWrt  int64  `json:"cw,omitempty"`
}

const usageDayLayout = "2006-01-02"

func newFileUsage(root string) *fileUsage {
	return &fileUsage{dir: filepath.Join(root, "usage"), days: map[string]*usageDay{}}
}

// AddUsage implements UsageCounter on the file store.
func (s *FileStore) AddUsage(ctx context.Context, principal, model string, at time.Time, u llm.Usage) error {
	return s.usage.add(principal, model, at, u)
}

// TokensUsed implements UsageCounter on the file store.
func (s *FileStore) TokensUsed(ctx context.Context, principal string, at time.Time) (day, month int64, err error) {
	return s.usage.used(principal, at)
}

// UsageSince implements UsageCounter on the file store.
func (s *FileStore) UsageSince(ctx context.Context, since time.Time) ([]UsageTotal, error) {
	return s.usage.since(since)
}

var _ UsageCounter = (*FileStore)(nil)

func (f *fileUsage) add(principal, model string, at time.Time, u llm.Usage) error {
	line := appendUsageLine(make([]byte, 0, 96+len(principal)+len(model)), principal, model, u)
	name := at.UTC().Format(usageDayLayout) + ".jsonl"
	f.outMu.Lock()
	defer f.outMu.Unlock()
	if f.out == nil || f.outName != name || !names(f.outPath, f.outIdent) {
		if !f.made.Load() {
			if err := os.MkdirAll(f.dir, dirPerm); err != nil {
				return err
			}
			f.made.Store(true)
		}
		path := filepath.Join(f.dir, name)
		fh, err := openFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, filePerm)
		if err != nil {
			return err
		}
		id, err := identOf(fh)
		if err != nil {
			_ = fh.Close()
			return err
		}
		f.closeOut()
		f.out, f.outName, f.outPath, f.outIdent = fh, name, path, id
	}
	if _, err := f.out.Write(line); err != nil {
		f.closeOut() // opened again by the next count
		return err
	}
	return nil
}

// appendUsageLine appends the line of one call and its newline: what
// protocol.Marshal makes of its usageLine, appended directly. A count runs
// on a goroutine of its own per model call (turnBudget.count), and
// go-json's encoder, a large frame, grew that fresh goroutine's stack at
// every count.
func appendUsageLine(b []byte, principal, model string, u llm.Usage) []byte {
	b = protocol.AppendJSONString(append(b, `{"p":`...), principal)
	b = protocol.AppendJSONString(append(b, `,"m":`...), model)
	b = appendUsageCount(b, `,"in":`, u.InputTokens)
	b = appendUsageCount(b, `,"out":`, u.OutputTokens)
	b = appendUsageCount(b, `,"th":`, u.ThoughtTokens)
	b = appendUsageCount(b, `,"cr":`, u.CachedReadTokens)
	b = appendUsageCount(b, `,"cw":`, u.CachedWriteTokens)
	return append(b, "}\n"...)
}

// appendUsageCount appends a count of usageLine, left out when 0
// (omitempty).
func appendUsageCount(b []byte, key string, n int64) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), n, 10)
}

// closeOut closes the kept day file. f.outMu held.
func (f *fileUsage) closeOut() {
	if f.out != nil {
		_ = f.out.Close()
		f.out, f.outName, f.outPath = nil, "", ""
	}
}

// close closes the kept day file (FileStore.Close); a later count opens
// it again.
func (f *fileUsage) close() {
	f.outMu.Lock()
	defer f.outMu.Unlock()
	f.closeOut()
}

func (f *fileUsage) used(principal string, at time.Time) (day, month int64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	today := DayOf(at)
	for d := MonthOf(at); !d.After(today); d = d.AddDate(0, 0, 1) {
		ud, err := f.read(d.Format(usageDayLayout) + ".jsonl")
		if err != nil {
			return 0, 0, err
		}
		var n int64
		for k, t := range ud.totals {
			if k.principal == principal {
				n += t.Tokens()
			}
		}
		month += n
		if d.Equal(today) {
			day = n
		}
	}
	return day, month, nil
}

func (f *fileUsage) since(since time.Time) ([]UsageTotal, error) {
	ents, err := os.ReadDir(f.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	from := DayOf(since)
	sum := map[usageKey]*UsageTotal{}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range ents {
		d, err := time.Parse(usageDayLayout, strings.TrimSuffix(e.Name(), ".jsonl"))
		if err != nil || !strings.HasSuffix(e.Name(), ".jsonl") || d.Before(from) {
			continue
		}
		ud, err := f.read(e.Name())
		if err != nil {
			return nil, err
		}
		for k, t := range ud.totals {
			addTotal(sum, k, t.Calls, t.Usage)
		}
	}
	return sortedTotals(sum), nil
}

// read brings one day's totals up to the end of its file (f.mu held). A
// last line without its newline is being written: it is read next time.
func (f *fileUsage) read(name string) (*usageDay, error) {
	ud := f.days[name]
	if ud == nil {
		ud = &usageDay{totals: map[usageKey]*UsageTotal{}}
		f.days[name] = ud
	}
	fh, err := os.Open(filepath.Join(f.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		if ud.info != nil { // removed: nothing counted that day any more
			*ud = usageDay{totals: map[usageKey]*UsageTotal{}}
		}
		return ud, nil
	}
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	info, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if ud.info != nil && (!os.SameFile(info, ud.info) || info.Size() < ud.offset) {
		*ud = usageDay{totals: map[usageKey]*UsageTotal{}} // replaced, or cut short
	}
	ud.info = info
	if _, err := fh.Seek(ud.offset, io.SeekStart); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(fh)
	if err != nil {
		return nil, err
	}
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return ud, nil
	}
	ud.offset += int64(end + 1)
	for _, raw := range bytes.Split(data[:end], []byte{'\n'}) {
		var l usageLine
		if safeUnmarshal(raw, &l) != nil {
			continue // a damaged line counts nothing
		}
		addTotal(ud.totals, usageKey{l.Principal, l.Model}, 1, Usage{InputTokens: l.Input, OutputTokens: l.Output,
			ThoughtTokens: l.Thought, CachedReadTokens: l.CacheRead, CachedWriteTokens: l.CacheWrt})
	}
	return ud, nil
}

func addTotal(sum map[usageKey]*UsageTotal, k usageKey, calls int64, u Usage) {
	t := sum[k]
	if t == nil {
		t = &UsageTotal{Principal: k.principal, Model: k.model}
		sum[k] = t
	}
	t.Calls += calls
	t.InputTokens += u.InputTokens
	t.OutputTokens += u.OutputTokens
	t.ThoughtTokens += u.ThoughtTokens
	t.CachedReadTokens += u.CachedReadTokens
	t.CachedWriteTokens += u.CachedWriteTokens
}

func sortedTotals(sum map[usageKey]*UsageTotal) []UsageTotal {
	out := make([]UsageTotal, 0, len(sum))
	for _, t := range sum {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Principal != out[j].Principal {
			return out[i].Principal < out[j].Principal
		}
		return out[i].Model < out[j].Model
	})
	return out
}
