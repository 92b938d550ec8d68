package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestBucketRoundTrip(t *testing.T) {
	for _, v := range []int64{0, 1, 127, 128, 129, 255, 256, 1000, 12345678, 1 << 40, math.MaxInt64} {
		i := bucket(v)
		lo, hi := bucketRange(i)
		if v < lo || v > hi {
			t.Errorf("v=%d in bucket %d [%d,%d]", v, i, lo, hi)
		}
		if v >= subCount && float64(hi-lo) > float64(lo)/subCount {
			t.Errorf("bucket %d [%d,%d] too wide", i, lo, hi)
		}
	}
	if bucket(math.MaxInt64) >= nBuckets {
		t.Fatal("bucket index out of range")
	}
	// Buckets are contiguous and increasing.
	prevHi := int64(-1)
	for i := range bucket(1<<20) + 1 {
		lo, hi := bucketRange(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d after %d", i, lo, prevHi)
		}
		prevHi = hi
	}
}

func TestRank(t *testing.T) {
	cases := []struct {
		p    float64
		n    int64
		want int64
	}{{50, 1, 1}, {50, 2, 1}, {50, 3, 2}, {99, 100, 99}, {99, 1000, 990}, {100, 7, 7}, {0.0001, 10, 1}, {90, 10, 9}, {99.9, 1000, 999}}
	for _, c := range cases {
		if got := Rank(c.p, c.n); got != c.want {
			t.Errorf("Rank(%v,%d) = %d, want %d", c.p, c.n, got, c.want)
		}
	}
}

func TestExact(t *testing.T) {
	vs := []int64{5, 1, 4, 2, 3}
	if Exact(vs, 50) != 3 || Exact(vs, 100) != 5 || Exact(vs, 1) != 1 || Exact(vs, 80) != 4 || Exact(vs, 81) != 5 {
		t.Fatal("nearest rank")
	}
	if Exact([]float64{}, 50) != 0 {
		t.Fatal("empty")
	}
	ds := []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}
	if Exact(ds, 50) != 2*time.Millisecond {
		t.Fatal("durations")
	}
}

func TestHistogramSmallExact(t *testing.T) {
	h := NewHistogram()
	for v := int64(1); v <= 100; v++ {
		h.Record(v)
	}
	// Values below 128 have exact buckets.
	for _, p := range []float64{1, 50, 90, 99, 100} {
		if got, want := h.Percentile(p), int64(p); got != want {
			t.Errorf("p%v = %d, want %d", p, got, want)
		}
	}
	if h.Count() != 100 || h.Min() != 1 || h.Max() != 100 || h.Mean() != 50.5 {
		t.Fatalf("count %d min %d max %d mean %v", h.Count(), h.Min(), h.Max(), h.Mean())
	}
}

func TestHistogramMatchesExactWithinPrecision(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	h := NewHistogram()
	vs := make([]int64, 0, 100_000)
	for range 100_000 {
		// Log-normal-ish latencies from µs to seconds.
		v := int64(math.Exp(r.NormFloat64()*2+14)) + 1
		vs = append(vs, v)
		h.Record(v)
	}
	slices.Sort(vs)
	for _, p := range []float64{50, 90, 99, 99.9, 100} {
		want := vs[Rank(p, int64(len(vs)))-1]
		got := h.Percentile(p)
		if rel := math.Abs(float64(got-want)) / float64(want); rel > 1.0/subCount {
			t.Errorf("p%v = %d, exact %d (%.2f%% off)", p, got, want, rel*100)
		}
		if got < want {
			t.Errorf("p%v = %d below the exact %d: the upper bound must not underestimate", p, got, want)
		}
	}
	if h.Max() != vs[len(vs)-1] || h.Min() != vs[0] {
		t.Fatal("min/max must be exact")
	}
}

func TestHistogramConcurrent(t *testing.T) {
	h := NewHistogram()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10_000 {
				h.Record(int64(g*10_000 + i))
			}
		}()
	}
	wg.Wait()
	if h.Count() != 80_000 || h.Max() != 79_999 || h.Min() != 0 {
		t.Fatalf("count %d max %d min %d", h.Count(), h.Max(), h.Min())
	}
}

func TestHistogramEmptyAndNegative(t *testing.T) {
	h := NewHistogram()
	if h.Percentile(99) != 0 || h.Max() != 0 || h.Min() != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram")
	}
	h.Record(-5)
	if h.Max() != 0 || h.Count() != 1 {
		t.Fatal("negative counts as 0")
	}
}

func TestBins(t *testing.T) {
	h := NewHistogram()
	for _, v := range []int64{1, 5, 10, 11, 99, 100, 5000} {
		h.Record(v)
	}
	bins := h.Bins([]int64{10, 100})
	want := []int64{2, 3, 2}
	for i, b := range bins {
		if b.Count != want[i] {
			t.Errorf("bin %d [%d,%d) = %d, want %d", i, b.Lo, b.Hi, b.Count, want[i])
		}
	}
	if bins[2].Hi != -1 {
		t.Fatal("last bin must be open")
	}
}

func TestSummary(t *testing.T) {
	h := NewHistogram()
	for i := range 100 {
		h.RecordDuration(time.Duration(i+1) * time.Microsecond)
	}
	s := h.Summary()
	if s.Count != 100 || math.Abs(s.P50MS-0.050) > 0.001 || math.Abs(s.MaxMS-0.1) > 1e-9 {
		t.Fatalf("%+v", s)
	}
}

func TestRate(t *testing.T) {
	start := time.Unix(1000, 0)
	r := NewRate(start, 3*time.Second)
	r.Add(start, 1)
	r.Add(start.Add(1500*time.Millisecond), 2)
	r.Add(start.Add(10*time.Second), 4) // past the span: last second
	r.Add(start.Add(-time.Second), 8)   // before: first second
	got := r.PerSecond(start.Add(time.Hour))
	if !slices.Equal(got, []int64{9, 2, 0, 4}) {
		t.Fatalf("%v", got)
	}
	if got := r.PerSecond(start.Add(1200 * time.Millisecond)); len(got) != 2 {
		t.Fatalf("%v", got)
	}
}

func TestSlope(t *testing.T) {
	xs := []float64{0, 1, 2, 3, 4}
	ys := []float64{1, 3, 5, 7, 9}
	s, r2 := Slope(xs, ys)
	if math.Abs(s-2) > 1e-12 || math.Abs(r2-1) > 1e-12 {
		t.Fatalf("slope %v r2 %v", s, r2)
	}
	s, _ = Slope(xs, []float64{4, 4, 4, 4, 4})
	if s != 0 {
		t.Fatalf("flat slope %v", s)
	}
	if s, _ := Slope([]float64{1}, []float64{1}); s != 0 {
		t.Fatal("single point")
	}
	if s, _ := Slope([]float64{1, 1}, []float64{1, 2}); s != 0 {
		t.Fatal("vertical")
	}
}

func TestCounter(t *testing.T) {
	var c Counter
	c.Inc("a")
	c.Inc("a")
	c.Inc("b")
	if c.Total() != 3 || c.Snapshot()["a"] != 2 {
		t.Fatal(c.Snapshot())
	}
}
