package protocol

import (
	"bytes"
	"strconv"
	"strings"
)

// IDKey returns what identifies the request with this id, for matching it
// with an id sent again later ($/cancel_request's requestId, an answer to
// one of our requests): two ids are the same request when their keys are
// equal. The id itself is answered as sent (see CanonicalID); the key reads
// it as any JSON reader would, so that one spelling of an id finds another:
//   - a string by its decoded text: "a" and "\u0061" are one id (a lone
//     surrogate escape or a raw byte that is not UTF-8 decodes to U+FFFD,
//     so "\ud800" is also "\ufffd");
//   - a number by its exact value: 1, 1.0, 10e-1 and 1e0 are one id, -0 is
//     0, and no rounding is involved (9007199254740993 is not
//     9007199254740992). JSON-RPC ids are strings or integers; a fraction
//     is compared the same way;
//   - null by itself; a string is never a number ("1" is not 1).
//
// Anything else (nil, malformed) gives "", which matches nothing.
func IDKey(id RawMessage) string {
	id = bytes.TrimSpace(id)
	if len(id) == 0 {
		return ""
	}
	switch c := id[0]; {
	case c == '"':
		if plainASCIIString(id) {
			return "s" + string(id[1:len(id)-1])
		}
		var s string
		if Unmarshal(id, &s) != nil {
			return ""
		}
		return "s" + s
	case c == '-' || (c >= '0' && c <= '9'):
		return numberKey(id)
	case bytes.Equal(id, nullID):
		return "null"
	}
	return ""
}

// maxExponentDigits bounds the exponent numberKey adds up in an int: past
// it (1e1000000000000) a number is keyed by its text as written.
const maxExponentDigits = 15

// numberKey is "n" followed by the value of the JSON number text as
// significant digits and a power of ten ("n15e-1" for 1.50), or "" when
// text is not a JSON number.
func numberKey(text []byte) string {
	t := string(text)
	neg := strings.HasPrefix(t, "-")
	if neg {
		t = t[1:]
	}
	intPart, rest := leadingDigits(t)
	if intPart == "" || (len(intPart) > 1 && intPart[0] == '0') {
		return ""
	}
	var frac string
	if strings.HasPrefix(rest, ".") {
		if frac, rest = leadingDigits(rest[1:]); frac == "" {
			return ""
		}
	}
	exp := 0
	if rest != "" {
		if rest[0] != 'e' && rest[0] != 'E' {
			return ""
		}
		rest = rest[1:]
		expNeg := strings.HasPrefix(rest, "-")
		rest = strings.TrimPrefix(strings.TrimPrefix(rest, "-"), "+")
		digits, tail := leadingDigits(rest)
		if digits == "" || tail != "" {
			return ""
		}
		if digits = strings.TrimLeft(digits, "0"); len(digits) > maxExponentDigits {
			return "n" + string(text)
		}
		exp, _ = strconv.Atoi("0" + digits)
		if expNeg {
			exp = -exp
		}
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return "n0"
	}
	exp -= len(frac)
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	sign := ""
	if neg {
		sign = "-"
	}
	return "n" + sign + trimmed + "e" + strconv.Itoa(exp)
}

// leadingDigits splits s after its leading ASCII digits.
func leadingDigits(s string) (digits, rest string) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i], s[i:]
}
