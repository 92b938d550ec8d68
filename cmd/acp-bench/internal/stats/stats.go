// Package stats holds the measurement math of acp-bench: a concurrent
// log-linear latency histogram with bounded memory, nearest-rank
// percentiles, per-second rate series and the least-squares slope used for
// memory growth.
package stats

import (
	"math"
	"math/bits"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// subBits sets the histogram precision: 2^subBits buckets per power of two,
// so a recorded value is known within 1/128 (0.8 %).
const (
	subBits  = 7
	subCount = 1 << subBits
	nBuckets = subCount + (64-subBits)*subCount
)

// Histogram records non-negative int64 values (nanoseconds, usually). It is
// safe for concurrent use and never allocates after New; its memory is
// fixed (~60 KB) whatever the number of samples.
type Histogram struct {
	counts [nBuckets]atomic.Uint64
	n      atomic.Int64
	sum    atomic.Int64
	min    atomic.Int64
	max    atomic.Int64
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	h := &Histogram{}
	h.min.Store(math.MaxInt64)
	h.max.Store(math.MinInt64)
	return h
}

// bucket maps v ≥ 0 to its bucket index.
func bucket(v int64) int {
	u := uint64(v)
	if u < subCount {
		return int(u)
	}
	e := bits.Len64(u) - subBits - 1 // ≥ 0
	m := u >> uint(e)                // in [subCount, 2*subCount)
	return subCount + e*subCount + int(m-subCount)
}

// bucketRange is the smallest and the largest value of bucket i.
func bucketRange(i int) (lo, hi int64) {
	if i < subCount {
		return int64(i), int64(i)
	}
	e := (i - subCount) / subCount
	m := uint64(subCount + (i-subCount)%subCount)
	l := m << uint(e)
	h := l + (uint64(1) << uint(e)) - 1
	if h > math.MaxInt64 {
		h = math.MaxInt64
	}
	return int64(l), int64(h)
}

// Record adds one value; negative values count as 0 (a clock step).
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[bucket(v)].Add(1)
	h.n.Add(1)
	h.sum.Add(v)
	for {
		m := h.min.Load()
		if v >= m || h.min.CompareAndSwap(m, v) {
			break
		}
	}
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			break
		}
	}
}

// RecordDuration records d in nanoseconds.
func (h *Histogram) RecordDuration(d time.Duration) { h.Record(int64(d)) }

// Count is the number of values recorded.
func (h *Histogram) Count() int64 { return h.n.Load() }

// Max is the largest value recorded (0 when empty).
func (h *Histogram) Max() int64 {
	if h.n.Load() == 0 {
		return 0
	}
	return h.max.Load()
}

// Min is the smallest value recorded (0 when empty).
func (h *Histogram) Min() int64 {
	if h.n.Load() == 0 {
		return 0
	}
	return h.min.Load()
}

// Mean is the average value (0 when empty).
func (h *Histogram) Mean() float64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return float64(h.sum.Load()) / float64(n)
}

// Percentile is the nearest-rank p-th percentile (0 < p ≤ 100): the
// smallest recorded value such that at least p % of the values are ≤ it,
// known within the bucket precision (the bucket's upper bound is returned,
// clamped to the true min and max). 0 when empty.
func (h *Histogram) Percentile(p float64) int64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := Rank(p, n)
	var seen int64
	for i := range h.counts {
		c := int64(h.counts[i].Load())
		if c == 0 {
			continue
		}
		seen += c
		if seen >= rank {
			_, hi := bucketRange(i)
			return min(max(hi, h.Min()), h.Max())
		}
	}
	return h.Max()
}

// Rank is the 1-based nearest rank of the p-th percentile of n values:
// ceil(p/100·n), at least 1 and at most n.
func Rank(p float64, n int64) int64 {
	// The epsilon keeps float noise (99.9/100·1000 = 999.0000000000001)
	// from moving the rank up by one.
	r := int64(math.Ceil(p/100*float64(n) - 1e-9))
	return min(max(r, 1), n)
}

// Exact is the nearest-rank p-th percentile of vs (which it sorts); 0 when
// vs is empty.
func Exact[T int64 | float64 | time.Duration](vs []T, p float64) T {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	return vs[Rank(p, int64(len(vs)))-1]
}

// Bin is one bar of a histogram chart: values in [Lo, Hi).
type Bin struct {
	Lo, Hi int64
	Count  int64
}

// Bins folds the histogram into bins with the given upper edges (sorted,
// ascending); values ≥ the last edge go to a final open bin (Hi = -1).
// Each fine bucket goes whole to the bin holding its lower bound.
func (h *Histogram) Bins(edges []int64) []Bin {
	out := make([]Bin, len(edges)+1)
	lo := int64(0)
	for i, e := range edges {
		out[i] = Bin{Lo: lo, Hi: e}
		lo = e
	}
	out[len(edges)] = Bin{Lo: lo, Hi: -1}
	for i := range h.counts {
		c := int64(h.counts[i].Load())
		if c == 0 {
			continue
		}
		l, _ := bucketRange(i)
		j := sort.Search(len(edges), func(j int) bool { return edges[j] > l })
		out[j].Count += c
	}
	return out
}

// Summary is a histogram's figures in milliseconds.
type Summary struct {
	Count  int64   `json:"count"`
	MinMS  float64 `json:"minMs"`
	MeanMS float64 `json:"meanMs"`
	P50MS  float64 `json:"p50Ms"`
	P90MS  float64 `json:"p90Ms"`
	P99MS  float64 `json:"p99Ms"`
	P999MS float64 `json:"p999Ms"`
	MaxMS  float64 `json:"maxMs"`
}

// Summary of a histogram of nanosecond values.
func (h *Histogram) Summary() Summary {
	ms := func(v int64) float64 { return float64(v) / 1e6 }
	return Summary{
		Count: h.Count(), MinMS: ms(h.Min()), MeanMS: h.Mean() / 1e6,
		P50MS: ms(h.Percentile(50)), P90MS: ms(h.Percentile(90)), P99MS: ms(h.Percentile(99)),
		P999MS: ms(h.Percentile(99.9)), MaxMS: ms(h.Max()),
	}
}

// Rate counts events per second of wall time since its start, for a chart
// of events/s over time. Memory is bounded by the number of seconds it is
// told to cover; later events go to the last second.
type Rate struct {
	start time.Time
	secs  []atomic.Int64
}

// NewRate covers [start, start+span).
func NewRate(start time.Time, span time.Duration) *Rate {
	n := max(int(span/time.Second)+1, 1)
	return &Rate{start: start, secs: make([]atomic.Int64, n)}
}

// Add counts n events at t.
func (r *Rate) Add(t time.Time, n int64) {
	i := int(t.Sub(r.start) / time.Second)
	i = min(max(i, 0), len(r.secs)-1)
	r.secs[i].Add(n)
}

// PerSecond returns the counts of the seconds up to until (inclusive of the
// second until falls in).
func (r *Rate) PerSecond(until time.Time) []int64 {
	n := min(int(until.Sub(r.start)/time.Second)+1, len(r.secs))
	out := make([]int64, max(n, 0))
	for i := range out {
		out[i] = r.secs[i].Load()
	}
	return out
}

// Slope is the least-squares slope dy/dx and the coefficient of
// determination R² of the points (0 when fewer than two distinct x).
func Slope(xs, ys []float64) (slope, r2 float64) {
	n := float64(min(len(xs), len(ys)))
	if n < 2 {
		return 0, 0
	}
	var sx, sy float64
	for i := range int(n) {
		sx += xs[i]
		sy += ys[i]
	}
	mx, my := sx/n, sy/n
	var sxx, sxy, syy float64
	for i := range int(n) {
		dx, dy := xs[i]-mx, ys[i]-my
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if sxx == 0 {
		return 0, 0
	}
	slope = sxy / sxx
	if syy > 0 {
		r2 = sxy * sxy / (sxx * syy)
	}
	return slope, r2
}

// Counter is a set of named counters, safe for concurrent use, for error
// kinds.
type Counter struct {
	mu sync.Mutex
	m  map[string]int64
}

// Inc adds one to name.
func (c *Counter) Inc(name string) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	c.m[name]++
	c.mu.Unlock()
}

// Snapshot copies the counters.
func (c *Counter) Snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// Total is the sum of all counters.
func (c *Counter) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t int64
	for _, v := range c.m {
		t += v
	}
	return t
}
