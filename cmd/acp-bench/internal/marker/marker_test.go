package marker

import (
	"strings"
	"testing"
)

func TestAppendScanRoundTrip(t *testing.T) {
	var b []byte
	b = append(b, "noise 12 @ "...)
	b = Append(b, 0, 1700000000000000001)
	b = Append(b, 1, 1700000000000000002)
	b = append(b, "x"...)
	b = Append(b, 42, 7)
	var seqs, tss []int64
	n := Scan(b, func(s, ts int64) { seqs = append(seqs, s); tss = append(tss, ts) })
	if n != 3 || len(seqs) != 3 {
		t.Fatalf("found %d markers %v in %q", n, seqs, b)
	}
	want := [][2]int64{{0, 1700000000000000001}, {1, 1700000000000000002}, {42, 7}}
	for i, w := range want {
		if seqs[i] != w[0] || tss[i] != w[1] {
			t.Errorf("marker %d = %d@%d, want %d@%d", i, seqs[i], tss[i], w[0], w[1])
		}
	}
}

func TestScanIgnoresMalformed(t *testing.T) {
	for _, s := range []string{"", "12", "12@", "12@34", "@34|", "a@1|", "12@x|", "99999999999999999999@1|", "1@99999999999999999999|"} {
		if n := Scan([]byte(s), func(int64, int64) {}); n != 0 {
			t.Errorf("Scan(%q) found %d markers", s, n)
		}
	}
	// A digit glued to the front of a marker makes another number, but the
	// scan resynchronises on the next marker.
	if n := Scan([]byte("7@8|junk3@4|"), func(int64, int64) {}); n != 2 {
		t.Errorf("found %d, want 2", n)
	}
}

func TestNowIsParsable(t *testing.T) {
	m := Now(5)
	if !strings.HasPrefix(m, "5@") || !strings.HasSuffix(m, "|") {
		t.Fatalf("Now(5) = %q", m)
	}
	got := int64(-1)
	Scan([]byte(m), func(s, ts int64) {
		got = s
		if ts <= 0 {
			t.Errorf("timestamp %d", ts)
		}
	})
	if got != 5 {
		t.Fatalf("seq %d", got)
	}
}

func track(seqs ...int64) *Tracker {
	tr := NewTracker()
	for _, s := range seqs {
		tr.Add(s)
	}
	return tr
}

func TestTrackerPerfect(t *testing.T) {
	tr := NewTracker()
	for i := range int64(1000) {
		tr.Add(i)
	}
	c := tr.Finish(1000)
	if !c.OK() || c.Received != 1000 || c.FirstGap != -1 {
		t.Fatalf("%+v", c)
	}
}

func TestTrackerGap(t *testing.T) {
	c := track(0, 1, 2, 5, 6).Finish(8)
	if c.Lost != 3 || c.FirstGap != 3 || c.Duplicate != 0 || c.Reordered != 0 || c.OK() {
		t.Fatalf("%+v", c)
	}
	// Missing at the very end.
	c = track(0, 1).Finish(3)
	if c.Lost != 1 || c.FirstGap != 2 {
		t.Fatalf("%+v", c)
	}
	// Nothing at all.
	c = NewTracker().Finish(130)
	if c.Lost != 130 || c.FirstGap != 0 {
		t.Fatalf("%+v", c)
	}
}

func TestTrackerDuplicate(t *testing.T) {
	c := track(0, 1, 1, 2, 0, 2).Finish(3)
	if c.Duplicate != 3 || c.Lost != 0 || c.Reordered != 0 || c.Received != 6 || c.OK() {
		t.Fatalf("%+v", c)
	}
}

func TestTrackerReorder(t *testing.T) {
	c := track(0, 2, 1, 3).Finish(4)
	if c.Reordered != 1 || c.Lost != 0 || c.Duplicate != 0 || c.OK() {
		t.Fatalf("%+v", c)
	}
	// A late chunk is a reorder, not a loss; a repeat of it is a duplicate.
	c = track(1, 2, 3, 0, 0).Finish(4)
	if c.Reordered != 1 || c.Duplicate != 1 || c.Lost != 0 {
		t.Fatalf("%+v", c)
	}
}

func TestTrackerUnexpected(t *testing.T) {
	c := track(0, 1, 2, 3, 200, -1).Finish(3)
	if c.Unexpected != 3 || c.Lost != 0 || c.OK() {
		t.Fatalf("%+v", c)
	}
}

func TestTrackerWordBoundaries(t *testing.T) {
	tr := NewTracker()
	for i := range int64(200) {
		if i != 63 && i != 64 && i != 127 {
			tr.Add(i)
		}
	}
	c := tr.Finish(200)
	if c.Lost != 3 || c.FirstGap != 63 {
		t.Fatalf("%+v", c)
	}
	tr.Reset()
	tr.Add(0)
	if c := tr.Finish(1); !c.OK() || c.Received != 1 {
		t.Fatalf("after reset: %+v", c)
	}
}

func TestSum(t *testing.T) {
	s := Sum(track(0, 1).Finish(2), track(0, 0, 2).Finish(3))
	if s.Expected != 5 || s.Received != 5 || s.Lost != 1 || s.Duplicate != 1 || s.FirstGap != 1 {
		t.Fatalf("%+v", s)
	}
}

func TestIDs(t *testing.T) {
	var x IDs
	for _, id := range []uint64{1, 2, 5, 9} {
		if !x.Add(id) {
			t.Fatalf("id %d rejected", id)
		}
	}
	if x.Add(9) || x.Add(3) || x.Repeats != 2 {
		t.Fatalf("repeats %d", x.Repeats)
	}
	if last, ok := x.Last(); !ok || last != 9 {
		t.Fatalf("last %d", last)
	}
}

func TestFind(t *testing.T) {
	text := []byte(`{"text":"12@345|"}`)
	s, e, ok := Find(text)
	if !ok || string(text[s:e]) != "12@345|" {
		t.Fatalf("%d %d %v", s, e, ok)
	}
	if _, _, ok := Find([]byte("no marker 1@2")); ok {
		t.Fatal("found a marker in none")
	}
}

func TestSpan(t *testing.T) {
	line := []byte(`{"text":"1@100|2@200|3@300|"}`)
	start, end, ok := Span(line)
	if !ok || string(line[:start]) != `{"text":"` || string(line[end:]) != `"}` {
		t.Fatalf("%d %d %v", start, end, ok)
	}
	if _, _, ok := Span([]byte("no marker")); ok {
		t.Fatal("span without a marker")
	}
}
