package notification

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// A small validating JSON scanner for the decoder's fast path. It only
// answers "is this exactly one valid JSON value, and where are the members
// of this object"; anything it is unsure about makes the fast path give up
// and the encoding/json path decide (and classify errors). FuzzFastPath
// checks that the fast path never disagrees with the slow one.
//
// Objects are read in place: object hands each member's value to a
// callback, which reads it (a nested object, in the same pass) or skips
// it, so each byte is scanned once (but for a payload that comes before
// its event type, read again once the type is known).
//
// Skipping is done by functions of (b, i) that return the index after
// the token, or -1: an index kept in a register is cheaper to move than
// s.i, and skipped values are most of what the scanner reads.

const maxDepth = 10000 // encoding/json's nesting limit

type scanner struct {
	b     []byte
	i     int
	depth int
}

// space marks JSON's whitespace bytes.
var space = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// skipSpace returns the index of the first non-whitespace byte at or after
// i, or len(b).
func skipSpace(b []byte, i int) int {
	for i < len(b) && space[b[i]] {
		i++
	}
	return i
}

func (s *scanner) ws() { s.i = skipSpace(s.b, s.i) }

// peek returns the byte at s.i, or 0 at the end of the input.
func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// value skips one JSON value, validating it.
func (s *scanner) value() bool {
	end := skipValue(s.b, s.i, s.depth)
	if end < 0 {
		return false
	}
	s.i = end
	return true
}

// skipValue returns the index after the value at b[i] (after whitespace),
// or -1 when it is not a valid one; depth is the nesting depth at i.
func skipValue(b []byte, i, depth int) int {
	i = skipSpace(b, i)
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{' || c == '[':
		s := scanner{b: b, i: i, depth: depth}
		if c == '{' && !s.object(nil) || c == '[' && !s.array(nil) {
			return -1
		}
		return s.i
	case c == 't':
		return skipLit(b, i, "true")
	case c == 'f':
		return skipLit(b, i, "false")
	case c == 'n':
		return skipLit(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(b, i)
	}
	return -1
}

// skip skips one JSON value and returns its raw bytes.
func (s *scanner) skip() ([]byte, bool) {
	s.ws()
	start := s.i
	ok := s.value()
	return s.b[start:s.i], ok
}

// null skips a null at s.i, reporting whether there was one.
func (s *scanner) null() bool {
	end := skipLit(s.b, s.i, "null")
	if end < 0 {
		return false
	}
	s.i = end
	return true
}

// skipLit returns the index after the literal l at b[i], or -1.
func skipLit(b []byte, i int, l string) int {
	if len(b)-i < len(l) || string(b[i:i+len(l)]) != l {
		return -1
	}
	return i + len(l)
}

// Strings are scanned a word (8 bytes) at a time: they are mostly runs of
// bytes that stand for themselves, and only '"', '\\' and control
// characters (and, when decoding, non-ASCII bytes) need a closer look.
// With ones = 0x0101...01 and highs = 0x8080...80, (x - ones*n) &^ x &
// highs sets the high bit of the first byte of x that is < n (n <= 0x80);
// bytes after that first one may be flagged falsely (by the borrow), so
// only the lowest flag is used. A byte equal to c is a byte < 1 of
// x ^ ones*c. (Sean Anderson's Bit Twiddling Hacks: "Determine if a word
// has a byte less than n".)
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// stops flags the bytes of x that end a run of plain string bytes (the
// first one exactly): '"', '\\' and control characters. Flipping bit 1
// maps '"' (0x22) to 0x20 and keeps control characters below 0x20, while
// no other byte lands below 0x21, so one test finds both.
func stops(x uint64) uint64 { return stopsOr(x, 0) }

// stopsOr is stops that also flags the bytes whose high bit is set in y:
// stopsOr(x, x) flags the non-ASCII bytes of x too.
func stopsOr(x, y uint64) uint64 {
	q, e := x^(ones*0x02), x^(ones*'\\')
	return ((q-ones*0x21)&^q | (e-ones)&^e | y) & highs
}

// skipPlain returns the index of the first byte at or after i that is '"',
// '\\' or a control character, or len(b). Bytes >= 0x80 are plain, as for
// encoding/json's scanner (Decode checks UTF-8 on the whole body).
func skipPlain(b []byte, i int) int {
	for ; i <= len(b)-8; i += 8 {
		if m := stops(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	return skipPlainTail(b, i)
}

// skipPlainTail is skipPlain for the last few bytes, one at a time (kept
// apart so that skipPlain is small enough to be inlined).
func skipPlainTail(b []byte, i int) int {
	for i < len(b) && b[i] >= 0x20 && b[i] != '"' && b[i] != '\\' {
		i++
	}
	return i
}

// skipString returns the index after the string at b[i] (which is '"'),
// or -1 when it is not a valid one.
func skipString(b []byte, i int) int {
	for i++; ; {
		// skipPlain, written out: this is the scanner's hottest loop, and
		// most strings end within their first word or two.
		for i <= len(b)-8 {
			if m := stops(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
		if i+8 > len(b) {
			i = skipPlainTail(b, i)
		}
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			_, n := unescape(b[i:])
			if n == 0 {
				return -1
			}
			i += n
		default: // a control character
			return -1
		}
	}
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// skipNumber returns the index after the number at b[i], or -1.
func skipNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if j := skipDigits(b, i+1); j > i+1 {
			i = j
		} else {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

// object scans an object at s.i (which is '{'). For each member it calls
// fn with the key's raw bytes (between the quotes) and s.i at the member's
// value, which fn must scan past (or return false to give up). A nil fn
// skips the values.
func (s *scanner) object(fn func(key []byte) bool) bool {
	if s.depth++; s.depth > maxDepth {
		return false
	}
	ok := s.objectMembers(fn)
	s.depth--
	return ok
}

func (s *scanner) objectMembers(fn func(key []byte) bool) bool {
	b := s.b
	i := skipSpace(b, s.i+1) // after '{'
	if i < len(b) && b[i] == '}' {
		s.i = i + 1
		return true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		key := i + 1
		if i = skipString(b, i); i < 0 {
			return false
		}
		end := i - 1
		if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
			return false
		}
		s.i = skipSpace(b, i+1)
		if fn != nil { // fn reads the value, moving s.i past it
			if !fn(b[key:end]) {
				return false
			}
			i = s.i
		} else if i = skipValue(b, s.i, s.depth); i < 0 {
			return false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			s.i = i + 1
			return true
		default:
			return false
		}
	}
}

// array scans an array at s.i (which is '['), calling fn with s.i at each
// element, which fn must scan past (or return false to give up). A nil fn
// skips the elements.
func (s *scanner) array(fn func() bool) bool {
	if s.depth++; s.depth > maxDepth {
		return false
	}
	ok := s.arrayElements(fn)
	s.depth--
	return ok
}

func (s *scanner) arrayElements(fn func() bool) bool {
	b := s.b
	s.i = skipSpace(b, s.i+1) // after '['
	if s.i < len(b) && b[s.i] == ']' {
		s.i++
		return true
	}
	for {
		if fn == nil && !s.value() || fn != nil && !fn() {
			return false
		}
		i := skipSpace(b, s.i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			s.i = skipSpace(b, i+1)
		case ']':
			s.i = i + 1
			return true
		default:
			return false
		}
	}
}

// document scans s.b, which must be exactly one object (surrounding
// whitespace allowed), calling fn for its members as object does.
func (s *scanner) document(fn func(key []byte) bool) bool {
	s.ws()
	if s.peek() != '{' || !s.object(fn) {
		return false
	}
	s.ws()
	return s.i == len(s.b)
}

// unquote decodes the raw string literal q (with its quotes, already
// validated by the scanner) as encoding/json does: invalid UTF-8 and lone
// surrogates become U+FFFD.
func unquote(q []byte) string {
	s := scanner{b: q}
	out, _ := s.unquoted(nil)
	return string(out)
}

// unquoted scans the string at s.i (which is '"') as skipString does and
// returns it decoded as encoding/json decodes it: invalid UTF-8 and lone
// surrogates become U+FFFD. A string with nothing to decode (no escapes,
// valid UTF-8) comes back as a sub-slice of s.b, not a copy: callers must
// not modify it. Otherwise it is decoded into buf[:0], which is first
// replaced by a new buffer when it has less room than the rest of s.b (so
// pass a buffer that big, or use it for a string that ends the input).
// It validates and decodes in one pass: an envelope's oslo.message is most
// of the body.
func (s *scanner) unquoted(buf []byte) ([]byte, bool) {
	b, start := s.b, s.i+1
	i := skipPlain(b, start)
	if i < len(b) && b[i] == '"' && utf8.Valid(b[start:i]) {
		s.i = i + 1
		return b[start:i], true // nothing to decode
	}
	if cap(buf) < len(b)-start {
		buf = make([]byte, 0, len(b)-start)
	}
	out, i := buf[:0], start
	for {
		out, i = appendPlain(out, b, i)
		if i >= len(b) {
			return nil, false
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return out, true
		case c == '\\':
			r, n := unescape(b[i:])
			if n == 0 {
				return nil, false
			}
			out = utf8.AppendRune(out, r)
			i += n
		case c < 0x20:
			return nil, false
		default: // non-ASCII: invalid bytes become U+FFFD, one per byte
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				out = utf8.AppendRune(out, r)
			} else {
				out = append(out, b[i:i+n]...)
			}
			i += n
		}
	}
}

// appendPlain appends to out the bytes of b from i that decode to
// themselves, and the two-byte escapes (\" \\ \/ \b \f \n \r \t) between
// them, up to the first byte it leaves to the caller: '"', a control
// character, a non-ASCII byte or another escape. It returns out and that
// byte's index. While out has room it copies a word at a time, storing all
// 8 bytes past len(out) and keeping those before the stop: an envelope's
// oslo.message has an escaped quote every few bytes, so this beats an
// append and a return per run.
func appendPlain(out, b []byte, i int) ([]byte, int) {
	o, buf := len(out), out[:cap(out)]
	// A word is taken only with a byte after it, the one after a stop.
	for i < len(b)-8 && o < len(buf)-8 {
		x := binary.LittleEndian.Uint64(b[i:])
		binary.LittleEndian.PutUint64(buf[o:], x)
		m := stopsOr(x, x) // '"', '\\', control and non-ASCII bytes
		if m == 0 {
			i, o = i+8, o+8
			continue
		}
		n := bits.TrailingZeros64(m) / 8
		i, o = i+n, o+n
		e := simpleEscapes[b[i+1]]
		if b[i] != '\\' || e == 0 {
			return buf[:o], i
		}
		buf[o] = e // room: n < 8
		i, o = i+2, o+1
	}
	j := i // the last few bytes, one at a time
	for j < len(b) && b[j] >= 0x20 && b[j] < utf8.RuneSelf && b[j] != '"' && b[j] != '\\' {
		j++
	}
	return append(buf[:o], b[i:j]...), j
}

// simpleEscapes maps the byte after '\\' to what a two-byte escape stands
// for (0: not a two-byte escape).
var simpleEscapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// unescape decodes the escape sequence at the start of b (which is '\\'),
// returning the rune and the sequence's length, or length 0 when it is not
// a valid escape. A \u escape starting a UTF-16 surrogate pair takes both
// halves; a lone surrogate decodes to U+FFFD, as in encoding/json.
func unescape(b []byte) (rune, int) {
	if len(b) < 2 {
		return 0, 0
	}
	switch c := b[1]; {
	case simpleEscapes[c] != 0:
		return rune(simpleEscapes[c]), 2
	case c == 'u':
		r := hex4(b)
		if r < 0 {
			return 0, 0
		}
		if utf16.IsSurrogate(r) {
			if pair := utf16.DecodeRune(r, hex4(b[6:])); pair != utf8.RuneError {
				return pair, 12
			}
			return utf8.RuneError, 6
		}
		return r, 6
	}
	return 0, 0
}

// hex4 decodes the \u escape at the start of b (its four hex digits), or
// returns -1 when b does not start with one.
func hex4(b []byte) rune {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range b[2:6] {
		d := unhex(c)
		if d < 0 {
			return -1
		}
		r = r<<4 | rune(d)
	}
	return r
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}
