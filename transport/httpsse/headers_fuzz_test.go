package httpsse

import (
	"bytes"
	"net/netip"
	"strconv"
	"testing"
)

// Seeds: testdata/fuzz/<Target>.

// FuzzParseLastEventID: no panic; blank is "no id"; an accepted id is the
// decimal number written (leading zeros aside) and nothing else.
func FuzzParseLastEventID(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		n, err := parseLastEventID(raw)
		trimmed := bytes.TrimSpace(raw)
		switch {
		case err != nil:
			if n != nil {
				t.Fatalf("%q: an id and an error", raw)
			}
			if len(trimmed) == 0 {
				t.Fatalf("%q: blank must mean no id, not an error", raw)
			}
		case n == nil:
			if len(trimmed) != 0 {
				t.Fatalf("%q: ignored a non-blank header", raw)
			}
		default:
			digits := bytes.TrimLeft(trimmed, "0")
			if len(digits) == 0 {
				digits = []byte("0")
			}
			if strconv.FormatUint(*n, 10) != string(digits) {
				t.Fatalf("%q read as %d", raw, *n)
			}
		}
	})
}

// FuzzHostHeader: no panic; bound to loopback with nothing allowed, a Host
// is accepted only if it is empty, localhost or a loopback address.
func FuzzHostHeader(f *testing.F) {
	g := newEdgeGuard(Config{Host: "127.0.0.1"}.withDefaults())
	f.Fuzz(func(t *testing.T, host []byte) {
		if !g.hostAllowed(host) {
			return
		}
		name := normalHost(string(host))
		if len(host) == 0 || name == "localhost" {
			return
		}
		a, err := netip.ParseAddr(name)
		if err != nil || !a.Unmap().IsLoopback() {
			t.Fatalf("accepted Host %q (%q)", host, name)
		}
	})
}
