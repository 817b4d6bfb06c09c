package notification

import "unicode/utf8"

// A small validating JSON scanner for the decoder's fast path. It only
// answers "is this exactly one valid JSON value, and where are the members
// of this object"; anything it is unsure about makes the fast path give up
// and the encoding/json path decide (and classify errors). FuzzFastPath
// checks that the fast path never disagrees with the slow one.

const maxDepth = 10000 // encoding/json's nesting limit

type scanner struct {
	b     []byte
	i     int
	depth int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *scanner) ws() {
	for s.i < len(s.b) && isSpace(s.b[s.i]) {
		s.i++
	}
}

// value skips one JSON value, validating it.
func (s *scanner) value() bool {
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		return s.str()
	case c == '{':
		return s.object(nil)
	case c == '[':
		return s.array(nil)
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	}
	return false
}

func (s *scanner) lit(l string) bool {
	if len(s.b)-s.i < len(l) || string(s.b[s.i:s.i+len(l)]) != l {
		return false
	}
	s.i += len(l)
	return true
}

// str skips a string at s.i (which is '"').
func (s *scanner) str() bool {
	s.i++
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return true
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return false
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) {
					return false
				}
				for _, h := range s.b[s.i+2 : s.i+6] {
					if unhex(h) < 0 {
						return false
					}
				}
				s.i += 6
			default:
				return false
			}
		case c < 0x20:
			return false
		default:
			s.i++
		}
	}
	return false
}

func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

func (s *scanner) number() bool {
	if s.b[s.i] == '-' {
		s.i++
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if !s.digits() {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// member is one object member: the key's raw bytes (between the quotes)
// and the value's raw bytes.
type member func(key, val []byte) bool

// object skips an object at s.i, calling fn (if not nil) for each member.
func (s *scanner) object(fn member) bool {
	if s.depth++; s.depth > maxDepth {
		return false
	}
	defer func() { s.depth-- }()
	s.i++ // '{'
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return true
	}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		ks := s.i
		if !s.str() {
			return false
		}
		key := s.b[ks+1 : s.i-1]
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.ws()
		vs := s.i
		if !s.value() {
			return false
		}
		if fn != nil && !fn(key, s.b[vs:s.i]) {
			return false
		}
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// array skips an array, calling fn (if not nil) with each element.
func (s *scanner) array(fn func(val []byte) bool) bool {
	if s.depth++; s.depth > maxDepth {
		return false
	}
	defer func() { s.depth-- }()
	s.i++ // '['
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return true
	}
	for {
		s.ws()
		vs := s.i
		if !s.value() {
			return false
		}
		if fn != nil && !fn(s.b[vs:s.i]) {
			return false
		}
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// members iterates the members of b, which must be exactly one object
// (surrounding whitespace allowed).
func members(b []byte, fn member) bool {
	s := scanner{b: b}
	s.ws()
	if s.i >= len(b) || b[s.i] != '{' || !s.object(fn) {
		return false
	}
	s.ws()
	return s.i == len(b)
}

// elements iterates the elements of the array b.
func elements(b []byte, fn func(val []byte) bool) bool {
	s := scanner{b: b}
	if len(b) == 0 || b[0] != '[' || !s.array(fn) {
		return false
	}
	return s.i == len(b)
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

// unquote decodes the raw string literal q (with its quotes, already
// validated by the scanner) as encoding/json does: invalid UTF-8 and lone
// surrogates become U+FFFD.
func unquote(q []byte) string {
	inner := q[1 : len(q)-1]
	for _, c := range inner {
		if c == '\\' || c >= utf8.RuneSelf {
			return string(unquoteBytes(q))
		}
	}
	return string(inner)
}

// unquoteBytes is unquote into a new byte slice.
func unquoteBytes(q []byte) []byte {
	q = q[1 : len(q)-1]
	out := make([]byte, 0, len(q))
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '\\':
			switch q[i+1] {
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r := hex4(q[i+2:])
				i += 6
				if r >= 0xd800 && r < 0xdc00 && i+6 <= len(q) && q[i] == '\\' && q[i+1] == 'u' {
					if r2 := hex4(q[i+2:]); r2 >= 0xdc00 && r2 < 0xe000 {
						out = utf8.AppendRune(out, (r-0xd800)<<10+(r2-0xdc00)+0x10000)
						i += 6
						continue
					}
				}
				if r >= 0xd800 && r < 0xe000 {
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
				continue
			default: // " \ /
				out = append(out, q[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(q[i:])
			out = utf8.AppendRune(out, r) // RuneError for invalid bytes, like encoding/json
			i += size
		}
	}
	return out
}

func hex4(b []byte) rune {
	return rune(unhex(b[0])<<12 | unhex(b[1])<<8 | unhex(b[2])<<4 | unhex(b[3]))
}
