package notification

import (
	"bytes"
	"strconv"
)

// fast decodes the common, well-formed case without encoding/json (about
// 5-10x cheaper: one validating pass per level instead of a validation pass
// plus a reflective decode per level). It returns ok=false whenever the
// input is anything but plainly valid (bad JSON, wrong types, duplicate or
// case-folded keys, nulls where the slow path would complain): Decode then
// runs the encoding/json path, which decides and classifies. FuzzFastPath
// asserts that whenever fast succeeds, the slow path returns the same Event.
func (d Decoder) fast(body []byte) (*Event, bool) {
	ev := &Event{Envelope: EnvelopeNone}
	var version, msgRaw []byte
	var m msgFields
	seen := 0
	ok := members(body, func(k, v []byte) bool {
		switch {
		case string(k) == "oslo.version":
			version, seen = v, seen+1
		case string(k) == "oslo.message":
			msgRaw, seen = v, seen+1
		default:
			return !foldsTo(k, "oslo.version", "oslo.message") && m.set(k, v)
		}
		return true
	})
	if !ok || seen > 2 {
		return nil, false
	}
	if version != nil || msgRaw != nil {
		if m.n > 0 || string(version) != `"2.0"` || len(msgRaw) == 0 || msgRaw[0] != '"' {
			return nil, false
		}
		ev.Envelope = EnvelopeOslo2
		m = msgFields{}
		if !members(unquoteBytes(msgRaw), m.set) {
			return nil, false
		}
	}
	if m.eventType == nil || *m.eventType == "" {
		return nil, false
	}
	if err := fillHeader(ev, &m.message); err != nil {
		return nil, false
	}
	ev.Format = formatOf(m.Payload)
	sp, relevant := eventTypes[ev.EventType]
	if !relevant {
		return ev, true
	}
	ev.Kind = sp.kind
	if !fastPayload(ev, m.Payload) {
		return nil, false
	}
	if err := checkPayload(ev, sp); err != nil {
		return nil, false
	}
	return ev, true
}

// foldsTo reports whether k is not exactly one of names but encoding/json
// could still match it to one (case-insensitive match, escapes, non-ASCII).
func foldsTo(k []byte, names ...string) bool {
	if bytes.IndexByte(k, '\\') >= 0 {
		return true
	}
	for _, c := range k {
		if c >= 0x80 {
			return true
		}
	}
	for _, n := range names {
		if string(k) != n && bytes.EqualFold(k, []byte(n)) {
			return true
		}
	}
	return false
}

var messageKeys = []string{"event_type", "publisher_id", "priority", "message_id", "timestamp", "_context_request_id", "payload"}

type msgFields struct {
	message
	eventType *string
	n         int // known keys seen
	seen      [7]bool
}

func (m *msgFields) set(k, v []byte) bool {
	i := indexOf(messageKeys, k)
	if i < 0 {
		return !foldsTo(k, messageKeys...)
	}
	if m.seen[i] {
		return false // duplicate key: let encoding/json decide
	}
	m.seen[i], m.n = true, m.n+1
	if i == 6 { // payload: any value
		if string(v) != "null" {
			m.Payload = v
		}
		return true
	}
	s, ok := stringValue(v)
	if !ok {
		return false
	}
	switch i {
	case 0:
		if string(v) == "null" {
			return false
		}
		m.eventType = &s
		m.EventType = &s
	case 1:
		m.PublisherID = s
	case 2:
		m.Priority = s
	case 3:
		m.MessageID = s
	case 4:
		m.Timestamp = s
	case 5:
		m.RequestID = s
	}
	return true
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
}

func (p *fastFields) set(k, v []byte, top bool) bool {
	i := indexOf(payloadKeys, k)
	if i < 0 {
		return !foldsTo(k, payloadKeys...)
	}
	if i == 0 && !top {
		return true // nova_object.data inside nova_object.data: not read
	}
	if p.seen[i] {
		return false
	}
	p.seen[i] = true
	f := &p.f
	switch i {
	case 0:
		if string(v) == "null" {
			return true
		}
		if v[0] != '{' {
			return false
		}
		var inner fastFields
		if !members(v, func(k, v []byte) bool { return inner.set(k, v, false) }) {
			return false
		}
		p.data = &inner.f
		return true
	case 3, 4: // host, node: *string
		s, ok := stringValue(v)
		if !ok {
			return false
		}
		var ptr *string
		if string(v) != "null" {
			ptr = &s
		}
		if i == 3 {
			f.Host = ptr
		} else {
			f.Node = ptr
		}
		return true
	case 12:
		return p.blockDevices(v)
	}
	s, ok := stringValue(v)
	if !ok {
		return false
	}
	switch i {
	case 1:
		f.UUID = s
	case 2:
		f.InstanceID = s
	case 5:
		f.State = s
	case 6:
		f.TenantID = s
	case 7:
		f.UserID = s
	case 8:
		f.RequestID = s
	case 9:
		f.VolumeID = s
	case 10:
		f.OldVolumeID = s
	case 11:
		f.NewVolumeID = s
	}
	return true
}

func (p *fastFields) blockDevices(v []byte) bool {
	if string(v) == "null" {
		return true
	}
	if v[0] != '[' {
		return false
	}
	p.f.BlockDevices = []blockDevice{}
	return elements(v, func(e []byte) bool {
		var bd blockDevice
		if string(e) != "null" {
			if e[0] != '{' || !members(e, func(k, v []byte) bool { return bd.setOuter(k, v) }) {
				return false
			}
		}
		p.f.BlockDevices = append(p.f.BlockDevices, bd)
		return true
	})
}

var bdKeys = []string{"volume_id", "device_name", "boot_index"}

func (bd *blockDevice) setOuter(k, v []byte) bool {
	if string(k) != "nova_object.data" {
		return !foldsTo(k, "nova_object.data")
	}
	if bd.seenData || string(v) == "null" {
		return !bd.seenData
	}
	bd.seenData = true
	if v[0] != '{' {
		return false
	}
	var seen [3]bool
	return members(v, func(k, v []byte) bool {
		i := indexOf(bdKeys, k)
		if i < 0 {
			return !foldsTo(k, bdKeys...)
		}
		if seen[i] {
			return false
		}
		seen[i] = true
		if i == 2 {
			return bd.setBootIndex(v)
		}
		s, ok := stringValue(v)
		if !ok {
			return false
		}
		if i == 0 {
			bd.Data.VolumeID = s
		} else {
			bd.Data.DeviceName = s
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

func fastPayload(ev *Event, raw []byte) bool {
	if len(raw) == 0 || raw[0] != '{' {
		return false
	}
	var p fastFields
	if !members(raw, func(k, v []byte) bool { return p.set(k, v, true) }) {
		return false
	}
	f := &p.f
	if p.data != nil {
		f = p.data
	}
	applyFields(ev, f)
	return true
}
