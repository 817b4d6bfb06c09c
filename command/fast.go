package command

import "strconv"

// The intake decodes every command of every message, so the common case
// is decoded by hand: compact JSON as Marshal writes it, strings of plain
// ASCII without escapes, known keys once each. Anything else (escapes,
// non-ASCII, unknown or repeated keys, nulls, odd numbers) makes the fast
// path give up and encoding/json decide, with its exact semantics;
// FuzzFastDecode checks that the two never disagree when the fast path
// answers.

type fastScanner struct {
	b []byte
	i int
	// strs are the string values of the command being read, as spans of
	// b: command turns them into substrings of one string when the object
	// is complete (one allocation per command instead of one per value).
	strs []strSpan
}

type strSpan struct {
	dst        *string
	start, end int
}

func (s *fastScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *fastScanner) byte(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// span reads a string of printable ASCII without escapes and returns
// its contents' bounds in s.b.
func (s *fastScanner) span() (start, end int, ok bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return 0, 0, false
	}
	start = s.i + 1
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return start, j, true
		case c < 0x20 || c == '\\' || c >= 0x80:
			return 0, 0, false
		}
	}
	return 0, 0, false
}

// str reads a string value into *dst, which is set when the command is
// complete (see strs).
func (s *fastScanner) str(dst *string) bool {
	start, end, ok := s.span()
	if ok {
		s.strs = append(s.strs, strSpan{dst, start, end})
	}
	return ok
}

func (s *fastScanner) boolean() (bool, bool) {
	s.ws()
	switch {
	case len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "true":
		s.i += 4
		return true, true
	case len(s.b)-s.i >= 5 && string(s.b[s.i:s.i+5]) == "false":
		s.i += 5
		return false, true
	}
	return false, false
}

// small reads a non-negative integer of at most 6 digits without a
// leading zero (the version).
func (s *fastScanner) small() (int, bool) {
	s.ws()
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	n := s.i - start
	if n == 0 || n > 6 || (n > 1 && s.b[start] == '0') || (s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E')) {
		return 0, false
	}
	v, err := strconv.Atoi(string(s.b[start:s.i]))
	return v, err == nil
}

// object calls member for each key (valid during the call only); member
// reads the value.
func (s *fastScanner) object(member func(key []byte) bool) bool {
	if !s.byte('{') {
		return false
	}
	if s.byte('}') {
		return true
	}
	for {
		start, end, ok := s.span()
		if !ok || !s.byte(':') || !member(s.b[start:end]) {
			return false
		}
		if s.byte('}') {
			return true
		}
		if !s.byte(',') {
			return false
		}
	}
}

// command decodes one command object at s.i.
func (s *fastScanner) command(c *Command) bool {
	s.ws()
	objStart := s.i
	s.strs = s.strs[:0]
	var seen uint32
	once := func(bit uint32) bool {
		if seen&bit != 0 {
			return false // repeated key: let encoding/json decide
		}
		seen |= bit
		return true
	}
	var nvol int
	ok := s.object(func(k []byte) bool {
		switch string(k) {
		case "version":
			v, ok := s.small()
			c.Version = v
			return ok && once(1<<0)
		case "kind":
			return s.str((*string)(&c.Kind)) && once(1<<1)
		case "scope":
			return s.str((*string)(&c.Scope)) && once(1<<2)
		case "timestamp":
			s.ws()
			start := s.i
			if _, _, ok := s.span(); !ok || !once(1<<3) {
				return false
			}
			return c.Timestamp.UnmarshalJSON(s.b[start:s.i]) == nil // encoding/json's own parse
		case "volumes":
			if !once(1<<4) || !s.byte('[') {
				return false
			}
			if s.byte(']') {
				c.Volumes = []string{}
				return true
			}
			for {
				start, end, ok := s.span()
				if !ok {
					return false
				}
				s.strs = append(s.strs, strSpan{nil, start, end}) // nil: the next volume
				nvol++
				if s.byte(']') {
					return true
				}
				if !s.byte(',') {
					return false
				}
			}
		case "volume":
			if !once(1 << 5) {
				return false
			}
			c.Volume = &VolumeChange{}
			return s.volume(c.Volume)
		default:
			f, known := stringFields[string(k)]
			if !known {
				return false // unknown (or differently cased) key
			}
			return s.str(f.field(c)) && once(f.bit)
		}
	})
	if !ok {
		return false
	}
	raw := string(s.b[objStart:s.i]) // every string value is a substring of this
	if nvol > 0 {
		c.Volumes = make([]string, 0, nvol)
	}
	for _, sp := range s.strs {
		v := raw[sp.start-objStart : sp.end-objStart]
		if sp.dst == nil {
			c.Volumes = append(c.Volumes, v)
		} else {
			*sp.dst = v
		}
	}
	return true
}

// stringFields are the plain string members, each with its own bit above
// the six used in command.
var stringFields = map[string]struct {
	bit   uint32
	field func(*Command) *string
}{
	"host":          {1 << 6, func(c *Command) *string { return &c.Host }},
	"node":          {1 << 7, func(c *Command) *string { return &c.Node }},
	"instance_uuid": {1 << 8, func(c *Command) *string { return &c.InstanceUUID }},
	"project_id":    {1 << 9, func(c *Command) *string { return &c.ProjectID }},
	"user_id":       {1 << 10, func(c *Command) *string { return &c.UserID }},
	"state":         {1 << 11, func(c *Command) *string { return &c.State }},
	"event_type":    {1 << 12, func(c *Command) *string { return &c.EventType }},
	"format":        {1 << 13, func(c *Command) *string { return &c.Format }},
	"message_id":    {1 << 14, func(c *Command) *string { return &c.MessageID }},
	"request_id":    {1 << 15, func(c *Command) *string { return &c.RequestID }},
}

func (s *fastScanner) volume(v *VolumeChange) bool {
	var seen uint8
	return s.object(func(k []byte) bool {
		var bit uint8
		var dst *string
		switch string(k) {
		case "action":
			bit, dst = 1, &v.Action
		case "volume_id":
			bit, dst = 2, &v.VolumeID
		case "old_volume_id":
			bit, dst = 4, &v.OldVolumeID
		case "new_volume_id":
			bit, dst = 8, &v.NewVolumeID
		case "is_root":
			if seen&16 != 0 {
				return false
			}
			seen |= 16
			b, ok := s.boolean()
			v.IsRoot = b
			return ok
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return s.str(dst)
	})
}

// fastBatch decodes body (one command object or an array of them) like
// UnmarshalBatch, when it is in the plain form; ok=false means: use
// encoding/json.
func fastBatch(body []byte) (els []Element, ok bool) {
	s := &fastScanner{b: body}
	one := func() (Element, bool) {
		s.ws()
		start := s.i
		c := &Command{}
		if !s.command(c) {
			return Element{}, false
		}
		el := Element{Raw: body[start:s.i], Command: c}
		if err := c.Validate(); err != nil {
			el.Command, el.Err = nil, err
		}
		return el, true
	}
	if !s.byte('[') {
		el, ok := one()
		s.ws()
		if !ok || s.i != len(body) {
			return nil, false
		}
		el.Raw = body
		return []Element{el}, true
	}
	if s.byte(']') {
		return nil, false // empty: the slow path words the error
	}
	for {
		el, ok := one()
		if !ok || len(els) == MaxBatch {
			return nil, false
		}
		els = append(els, el)
		if s.byte(']') {
			break
		}
		if !s.byte(',') {
			return nil, false
		}
	}
	s.ws()
	return els, s.i == len(body)
}
