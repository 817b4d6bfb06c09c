package command

import (
	"encoding/json"
	"strconv"
	"time"
)

// Marshal encodes c as JSON, byte for byte what encoding/json writes.
//
// The dispatcher encodes one command per relevant notification, so the
// common case is written by hand: every string plain printable ASCII, the
// timestamp in years 0..9999. Anything else (a string needing an escape,
// non-ASCII, an out-of-range time) goes to encoding/json, which also
// decides every error. FuzzFastEncode checks that the two never disagree
// when the fast path answers.
func Marshal(c *Command) ([]byte, error) {
	if b, ok := appendCommand(make([]byte, 0, 512), c); ok {
		return b, nil
	}
	return json.Marshal(c)
}

// appendCommand appends c's JSON to b; false when c needs encoding/json.
func appendCommand(b []byte, c *Command) ([]byte, bool) {
	ok := true
	str := func(key, v string, omitEmpty bool) {
		if omitEmpty && v == "" {
			return
		}
		b = append(b, key...)
		b, ok = appendPlain(b, v, ok)
	}
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(c.Version), 10)
	str(`,"kind":`, string(c.Kind), false)
	str(`,"scope":`, string(c.Scope), false)
	str(`,"host":`, c.Host, true)
	str(`,"node":`, c.Node, true)
	str(`,"instance_uuid":`, c.InstanceUUID, true)
	str(`,"project_id":`, c.ProjectID, true)
	str(`,"user_id":`, c.UserID, true)
	str(`,"state":`, c.State, true)
	str(`,"event_type":`, c.EventType, false)
	str(`,"format":`, c.Format, false)
	str(`,"message_id":`, c.MessageID, true)
	str(`,"request_id":`, c.RequestID, true)
	if y := c.Timestamp.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := c.Timestamp.Zone(); off%60 != 0 || off <= -24*3600 || off >= 24*3600 {
		return b, false // what MarshalJSON refuses or would write differently
	}
	b = append(b, `,"timestamp":"`...)
	b = c.Timestamp.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if len(c.Volumes) > 0 {
		b = append(b, `,"volumes":[`...)
		for i, v := range c.Volumes {
			if i > 0 {
				b = append(b, ',')
			}
			b, ok = appendPlain(b, v, ok)
		}
		b = append(b, ']')
	}
	if v := c.Volume; v != nil {
		str(`,"volume":{"action":`, v.Action, false)
		str(`,"volume_id":`, v.VolumeID, true)
		str(`,"old_volume_id":`, v.OldVolumeID, true)
		str(`,"new_volume_id":`, v.NewVolumeID, true)
		if v.IsRoot {
			b = append(b, `,"is_root":true`...)
		}
		b = append(b, '}')
	}
	return append(b, '}'), ok
}

// appendPlain appends s quoted when encoding/json would write it
// unchanged: printable ASCII other than the quote, the backslash and the
// characters it escapes for HTML (<, >, &).
func appendPlain(b []byte, s string, ok bool) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return b, false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), ok
}
