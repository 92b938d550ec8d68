// Package marker embeds a sequence number and a send timestamp in every
// chunk the fake model streams ("<seq>@<unixnano>|"), finds them again in
// the text a client receives, and checks each stream for lost, duplicated
// and reordered chunks.
package marker

import (
	"fmt"
	"math/bits"
	"strconv"
	"time"
)

// Sep ends a marker; At separates the sequence number from the timestamp.
const (
	At  = '@'
	Sep = '|'
)

// Append appends the marker of chunk seq sent at ts (Unix nanoseconds).
func Append(b []byte, seq int64, ts int64) []byte {
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, At)
	b = strconv.AppendInt(b, ts, 10)
	return append(b, Sep)
}

// Now is the marker of chunk seq stamped with the current time; it is the
// fake model's llmtest.Reply.ChunkFunc.
func Now(seq int) string {
	var buf [48]byte
	return string(Append(buf[:0], int64(seq), time.Now().UnixNano()))
}

// Scan calls fn for every well-formed marker in text, in order, and returns
// how many it found. Text between markers that is not a marker is skipped,
// so a server that merges or splits chunks is still measured correctly as
// long as it does not cut a marker in two (a cut marker is not counted and
// shows up as a lost chunk).
func Scan(text []byte, fn func(seq, ts int64)) int {
	n := 0
	for i := 0; ; {
		seq, ts, _, end, ok := next(text, i)
		if !ok {
			return n
		}
		fn(seq, ts)
		n++
		i = end
	}
}

// Find returns the byte span [start, end) of the first marker in text.
func Find(text []byte) (start, end int, ok bool) {
	_, _, start, end, ok = next(text, 0)
	return start, end, ok
}

// Span returns the byte span [start, end) from the first marker's start to
// the last marker's end (a line carrying several joined chunks).
func Span(text []byte) (start, end int, ok bool) {
	_, _, start, end, ok = next(text, 0)
	for ok {
		_, _, _, e, more := next(text, end)
		if !more {
			break
		}
		end = e
	}
	return start, end, ok
}

// next finds the first marker at or after text[i:].
func next(text []byte, i int) (seq, ts int64, start, end int, ok bool) {
	for i < len(text) {
		// A marker starts with a digit that does not follow another digit.
		if !isDigit(text[i]) || (i > 0 && isDigit(text[i-1])) {
			i++
			continue
		}
		s, j, ok := digits(text, i)
		if !ok || j >= len(text) || text[j] != At {
			i = j
			continue
		}
		t, k, ok := digits(text, j+1)
		if !ok || k >= len(text) || text[k] != Sep {
			i = max(k, j+1)
			continue
		}
		return s, t, i, k + 1, true
	}
	return 0, 0, 0, 0, false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// digits parses the run of decimal digits at text[i:]; ok is false when
// there is none or it overflows int64.
func digits(text []byte, i int) (v int64, end int, ok bool) {
	end = i
	for end < len(text) && isDigit(text[end]) {
		d := int64(text[end] - '0')
		if v > (1<<63-1-d)/10 {
			return 0, end + 1, false
		}
		v = v*10 + d
		end++
	}
	return v, end, end > i
}

// Tracker checks one stream of sequence numbers that should arrive as
// 0, 1, …, n-1, each exactly once and in order. It is not safe for
// concurrent use; one stream (session) has one tracker.
type Tracker struct {
	seen      []uint64 // bitset of sequence numbers received
	distinct  int64
	max       int64 // highest sequence number received, -1 before any
	received  int64
	dups      int64
	reordered int64
	invalid   int64 // negative sequence numbers
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker { return &Tracker{max: -1} }

// Reset empties the tracker for the next stream, keeping its memory.
func (t *Tracker) Reset() {
	clear(t.seen)
	*t = Tracker{seen: t.seen[:0], max: -1}
}

// Add records the arrival of seq.
func (t *Tracker) Add(seq int64) {
	t.received++
	if seq < 0 {
		t.invalid++
		return
	}
	w, b := seq/64, uint64(1)<<(seq%64)
	for int64(len(t.seen)) <= w {
		t.seen = append(t.seen, 0)
	}
	if t.seen[w]&b != 0 {
		t.dups++
		return
	}
	t.seen[w] |= b
	t.distinct++
	if seq < t.max {
		t.reordered++
	} else {
		t.max = seq
	}
}

// Received is the number of sequence numbers added (duplicates included).
func (t *Tracker) Received() int64 { return t.received }

// Check is the verdict on one finished stream.
type Check struct {
	Expected  int64 `json:"expected"`
	Received  int64 `json:"received"`
	Lost      int64 `json:"lost"`
	Duplicate int64 `json:"duplicate"`
	Reordered int64 `json:"reordered"`
	// Unexpected counts sequence numbers outside 0…Expected-1.
	Unexpected int64 `json:"unexpected"`
	// FirstGap is the first missing sequence number, -1 when none is.
	FirstGap int64 `json:"firstGap"`
}

// OK reports a perfect stream.
func (c Check) OK() bool {
	return c.Lost == 0 && c.Duplicate == 0 && c.Reordered == 0 && c.Unexpected == 0
}

func (c Check) String() string {
	if c.OK() {
		return fmt.Sprintf("%d/%d ok", c.Received, c.Expected)
	}
	return fmt.Sprintf("%d/%d: lost %d (first %d), duplicate %d, reordered %d, unexpected %d",
		c.Received, c.Expected, c.Lost, c.FirstGap, c.Duplicate, c.Reordered, c.Unexpected)
}

// Finish judges the stream against the expected count n.
func (t *Tracker) Finish(n int64) Check {
	c := Check{Expected: n, Received: t.received, Duplicate: t.dups, Reordered: t.reordered, FirstGap: -1}
	inRange := int64(0)
	for w, word := range t.seen {
		if word == 0 {
			continue
		}
		lo := int64(w) * 64
		if lo+64 <= n {
			inRange += int64(bits.OnesCount64(word))
			continue
		}
		for b := range int64(64) {
			if word&(1<<b) != 0 && lo+b < n {
				inRange++
			}
		}
	}
	c.Unexpected = t.distinct - inRange + t.invalid
	c.Lost = n - inRange
	if c.Lost > 0 {
		for s := range n {
			w := s / 64
			if w >= int64(len(t.seen)) || t.seen[w]&(1<<(s%64)) == 0 {
				c.FirstGap = s
				break
			}
		}
	}
	return c
}

// Sum adds up the checks of many streams.
func Sum(cs ...Check) Check {
	var s Check
	s.FirstGap = -1
	for _, c := range cs {
		s.Add(c)
	}
	return s
}

// Add adds c to s.
func (s *Check) Add(c Check) {
	s.Expected += c.Expected
	s.Received += c.Received
	s.Lost += c.Lost
	s.Duplicate += c.Duplicate
	s.Reordered += c.Reordered
	s.Unexpected += c.Unexpected
	if s.FirstGap < 0 {
		s.FirstGap = c.FirstGap
	}
}

// IDs checks the SSE event ids of one connection: they must increase
// strictly across all its streams and reconnections.
type IDs struct {
	last    uint64
	any     bool
	Repeats int64 // ids not greater than the previous one
}

// Add records id and reports whether it is new (greater than every id seen).
func (x *IDs) Add(id uint64) bool {
	if x.any && id <= x.last {
		x.Repeats++
		return false
	}
	x.last, x.any = id, true
	return true
}

// Last is the highest id seen and whether there was one.
func (x *IDs) Last() (uint64, bool) { return x.last, x.any }
