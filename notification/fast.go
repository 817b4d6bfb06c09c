package notification

import (
	"bytes"
	"strconv"
	"sync"
	"unicode/utf8"
)

// fast decodes the common, well-formed case without encoding/json (about
// 10x cheaper: one pass over the body, which validates and decodes
// oslo.message, and one over the message, which validates it and reads
// the fields where they stand, instead of a validation pass plus a
// reflective decode per level). It returns ok=false whenever the
// input is anything but plainly valid (bad JSON, wrong types, duplicate or
// case-folded keys, nulls where the slow path would complain): Decode then
// runs the encoding/json path, which decides and classifies. FuzzFastPath
// asserts that whenever fast succeeds, the slow path returns the same Event.
func (d Decoder) fast(body []byte) (*Event, bool) {
	var buf msgBuffer
	defer buf.release()
	strs := arenas.Get().(*strArena)
	defer strs.release()
	ev := &Event{Envelope: EnvelopeNone}
	var version, msg []byte // oslo.version raw, oslo.message decoded
	m := newMsgFields(strs)
	seen := 0
	s := scanner{b: body}
	ok := s.document(func(k []byte) bool {
		var ok bool
		switch {
		case string(k) == "oslo.version":
			version, ok = s.skip()
		case string(k) == "oslo.message":
			// Most of the body: decoded in the pass that validates it.
			if s.peek() != '"' {
				return false
			}
			msg, ok = s.unquoted(buf.get(len(body)))
		default:
			return !foldsTo(k, "oslo.version", "oslo.message") && m.set(&s, k)
		}
		seen++
		return ok
	})
	if !ok || seen > 2 {
		return nil, false
	}
	if seen > 0 {
		if m.n > 0 || string(version) != `"2.0"` || msg == nil {
			return nil, false
		}
		ev.Envelope = EnvelopeOslo2
		m = newMsgFields(strs)
		strs.reset()
		inner := scanner{b: msg}
		if !inner.document(func(k []byte) bool { return m.set(&inner, k) }) {
			return nil, false
		}
	}
	if m.EventType == nil || m.eventType == "" {
		return nil, false
	}
	strs.finish()
	if err := fillHeader(ev, &m.message); err != nil {
		return nil, false
	}
	ev.Format = formatOf(m.Payload)
	sp, relevant := eventTypes[ev.EventType]
	if !relevant {
		return ev, true
	}
	ev.Kind = sp.kind
	if !m.read {
		// The payload came before the event type: read it now.
		raw := m.Payload
		s := scanner{b: raw}
		if len(raw) == 0 || raw[0] != '{' || !m.payload.read(&s) || s.i != len(raw) {
			return nil, false
		}
		strs.finish()
	}
	applyFields(ev, m.payload.instance())
	if err := checkPayload(ev, sp); err != nil {
		return nil, false
	}
	return ev, true
}

// strArena collects the string fields of one decode and, at finish,
// makes them substrings of one string: one allocation instead of one per
// field (a relevant notification has a dozen). Arenas are pooled: what
// finish hands out is a copy.
type strArena struct {
	buf   []byte
	spans []arenaSpan
}

type arenaSpan struct {
	dst        *string
	start, end int
}

var arenas = sync.Pool{New: func() any {
	return &strArena{buf: make([]byte, 0, 1024), spans: make([]arenaSpan, 0, 32)}
}}

// set arranges for *dst to be the JSON string v decoded (as unquote does)
// at finish, or sets it to "" now for a null; false when v is neither.
func (a *strArena) set(dst *string, v []byte) bool {
	switch {
	case string(v) == "null":
		*dst = ""
		return true
	case v[0] == '"':
		start := len(a.buf)
		s := scanner{b: v}
		out, _ := s.unquoted(nil) // v's own bytes unless it has escapes
		a.buf = append(a.buf, out...)
		a.spans = append(a.spans, arenaSpan{dst, start, len(a.buf)})
		return true
	}
	return false
}

// finish sets every pending field and empties the arena.
func (a *strArena) finish() {
	if len(a.spans) > 0 {
		all := string(a.buf)
		for _, sp := range a.spans {
			*sp.dst = all[sp.start:sp.end]
		}
	}
	a.reset()
}

// reset drops what is pending.
func (a *strArena) reset() {
	clear(a.spans) // no stale pointers into earlier decodes
	a.buf, a.spans = a.buf[:0], a.spans[:0]
}

func (a *strArena) release() {
	a.reset()
	if cap(a.buf) <= maxPooledMsg {
		arenas.Put(a)
	}
}

// msgBuffer is a pooled buffer for decoding oslo.message into (most of a
// body). Nothing fast returns points into it (an Event's strings are
// copies), so fast releases it when it returns.
type msgBuffer struct{ b *[]byte }

var msgBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledMsg = 64 << 10 // larger buffers are left to the GC

// get returns an empty buffer with room for n bytes.
func (m *msgBuffer) get(n int) []byte {
	if m.b == nil {
		m.b = msgBuffers.Get().(*[]byte)
	}
	if cap(*m.b) < n {
		*m.b = make([]byte, 0, n)
	}
	return (*m.b)[:0]
}

func (m *msgBuffer) release() {
	if m.b != nil && cap(*m.b) <= maxPooledMsg {
		msgBuffers.Put(m.b)
	}
}

// foldsTo reports whether k is not exactly one of names but encoding/json
// could still match it to one (case-insensitive match, escapes, non-ASCII).
// The names are lower-case ASCII, so a key without upper-case letters,
// escapes or non-ASCII bytes (the usual key) folds to one only by being it.
func foldsTo(k []byte, names ...string) bool {
	i := 0
	for i < len(k) && !foldable[k[i]] {
		i++
	}
	if i == len(k) {
		return false
	}
	for _, c := range k[i:] {
		if c == '\\' || c >= utf8.RuneSelf {
			return true
		}
	}
	for _, n := range names {
		if bytes.EqualFold(k, []byte(n)) {
			return true
		}
	}
	return false
}

// foldable marks the key bytes foldsTo must look at: upper-case letters,
// '\\' (an escape) and non-ASCII bytes.
var foldable = func() (t [256]bool) {
	for c := range t {
		t[c] = 'A' <= c && c <= 'Z' || c == '\\' || c >= utf8.RuneSelf
	}
	return t
}()

var messageKeys = []string{"event_type", "publisher_id", "priority", "message_id", "timestamp", "_context_request_id", "payload"}

type msgFields struct {
	message
	strs      *strArena // sets the string fields when the scan is complete
	eventType string    // message.EventType points here once it is seen
	n         int       // known keys seen
	seen      [7]bool
	payload   fastFields // the payload's fields, once read
	read      bool       // payload holds them
}

// newMsgFields returns fields whose strings, the payload's included, are
// set from strs when it finishes.
func newMsgFields(strs *strArena) msgFields {
	return msgFields{strs: strs, payload: fastFields{strs: strs}}
}

// set reads the message member k, with s at its value.
func (m *msgFields) set(s *scanner, k []byte) bool {
	i := indexOf(messageKeys, k)
	if i < 0 {
		return !foldsTo(k, messageKeys...) && s.value()
	}
	if m.seen[i] {
		return false // duplicate key: let encoding/json decide
	}
	m.seen[i], m.n = true, m.n+1
	if i == 6 {
		return m.setPayload(s)
	}
	v, ok := s.skip()
	if !ok {
		return false
	}
	if i == 0 { // needed now: it decides how the payload is read
		str, ok := stringValue(v)
		if !ok || string(v) == "null" {
			return false
		}
		m.eventType = str
		m.EventType = &m.eventType
		return true
	}
	return m.strs.set([...]*string{1: &m.PublisherID, 2: &m.Priority, 3: &m.MessageID, 4: &m.Timestamp, 5: &m.RequestID}[i], v)
}

// setPayload keeps the raw payload (any value; Format is read from it).
// When the event type came first, as oslo writes messages, and scour acts
// on it, the payload is read in the same pass; else fast reads it later.
func (m *msgFields) setPayload(s *scanner) bool {
	start := s.i
	var ok bool
	if m.EventType != nil && relevantType(m.eventType) && s.peek() == '{' {
		ok = m.payload.read(s)
		m.read = ok
	} else {
		ok = s.value()
	}
	if raw := s.b[start:s.i]; string(raw) != "null" {
		m.Payload = raw
	}
	return ok
}

func relevantType(eventType string) bool {
	_, ok := eventTypes[eventType]
	return ok
}

func indexOf(names []string, k []byte) int {
	for i, n := range names {
		if string(k) == n {
			return i
		}
	}
	return -1
}

// stringValue accepts a JSON string or null ("").
func stringValue(v []byte) (string, bool) {
	switch {
	case string(v) == "null":
		return "", true
	case v[0] == '"':
		return unquote(v), true
	}
	return "", false
}

var payloadKeys = []string{"nova_object.data", "uuid", "instance_id", "host", "node", "state", "tenant_id", "user_id",
	"request_id", "volume_id", "old_volume_id", "new_volume_id", "block_devices"}

type fastFields struct {
	f    instanceFields
	data *instanceFields
	seen [13]bool
	strs *strArena // sets the string fields when the scan is complete
}

// read reads a payload object at s.i.
func (p *fastFields) read(s *scanner) bool {
	return s.object(func(k []byte) bool { return p.set(s, k, true) })
}

// instance returns the fields scour reads: a versioned payload carries
// them under nova_object.data, a legacy one at the top.
func (p *fastFields) instance() *instanceFields {
	if p.data != nil {
		return p.data
	}
	return &p.f
}

// set reads the payload member k, with s at its value. Nested objects
// (nova_object.data, block_devices) are read in place, in the pass that
// validates them.
func (p *fastFields) set(s *scanner, k []byte, top bool) bool {
	i := indexOf(payloadKeys, k)
	if i < 0 {
		return !foldsTo(k, payloadKeys...) && s.value()
	}
	if i == 0 && !top {
		return s.value() // nova_object.data inside nova_object.data: not read
	}
	if p.seen[i] {
		return false
	}
	p.seen[i] = true
	switch i {
	case 0:
		return p.setData(s)
	case 3, 4: // host, node: *string, nil for null
		v, ok := s.skip()
		if !ok {
			return false
		}
		var ptr *string
		if string(v) != "null" {
			ptr = new(string)
			if !p.strs.set(ptr, v) {
				return false
			}
		}
		if i == 3 {
			p.f.Host = ptr
		} else {
			p.f.Node = ptr
		}
		return true
	case 12:
		return p.blockDevices(s)
	}
	v, ok := s.skip()
	if !ok {
		return false
	}
	f := &p.f
	return p.strs.set([...]*string{1: &f.UUID, 2: &f.InstanceID, 5: &f.State, 6: &f.TenantID, 7: &f.UserID,
		8: &f.RequestID, 9: &f.VolumeID, 10: &f.OldVolumeID, 11: &f.NewVolumeID}[i], v)
}

// setData reads a versioned payload's nova_object.data.
func (p *fastFields) setData(s *scanner) bool {
	if s.null() {
		return true
	}
	if s.peek() != '{' {
		return false
	}
	inner := fastFields{strs: p.strs}
	if !s.object(func(k []byte) bool { return inner.set(s, k, false) }) {
		return false
	}
	p.data = &inner.f
	return true
}

func (p *fastFields) blockDevices(s *scanner) bool {
	if s.null() {
		return true
	}
	if s.peek() != '[' {
		return false
	}
	p.f.BlockDevices = []blockDevice{}
	return s.array(func() bool {
		var bd blockDevice
		if !s.null() {
			if s.peek() != '{' || !s.object(func(k []byte) bool { return bd.setOuter(s, k) }) {
				return false
			}
		}
		p.f.BlockDevices = append(p.f.BlockDevices, bd)
		return true
	})
}

var bdKeys = []string{"volume_id", "device_name", "boot_index"}

func (bd *blockDevice) setOuter(s *scanner, k []byte) bool {
	if string(k) != "nova_object.data" {
		return !foldsTo(k, "nova_object.data") && s.value()
	}
	if bd.seenData {
		return false
	}
	if s.null() {
		return true // like encoding/json: a null leaves the struct as it is
	}
	bd.seenData = true
	if s.peek() != '{' {
		return false
	}
	var seen [3]bool
	return s.object(func(k []byte) bool {
		i := indexOf(bdKeys, k)
		if i < 0 {
			return !foldsTo(k, bdKeys...) && s.value()
		}
		if seen[i] {
			return false
		}
		seen[i] = true
		v, ok := s.skip()
		if !ok {
			return false
		}
		if i == 2 {
			return bd.setBootIndex(v)
		}
		str, ok := stringValue(v)
		if !ok {
			return false
		}
		if i == 0 {
			bd.Data.VolumeID = str
		} else {
			bd.Data.DeviceName = str
		}
		return true
	})
}

func (bd *blockDevice) setBootIndex(v []byte) bool {
	if string(v) == "null" {
		return true
	}
	n, err := strconv.Atoi(string(v))
	if err != nil {
		return false // 1.0, 1e3, "0": encoding/json decides
	}
	bd.Data.BootIndex = &n
	return true
}
