package notification

import (
	"errors"
	"strings"
	"testing"

	"github.com/scour-project/scour/internal/oslo"
)

func TestMalformed(t *testing.T) {
	t.Parallel()
	good := `{"event_type": "instance.delete.end", "publisher_id": "nova-compute:c1", "payload": {"nova_object.data": {"uuid": "178b0921-8f85-4257-88b6-2e743b5a975c", "host": "c1"}}}`
	env := func(inner string) string {
		b, err := oslo.Encode([]byte(inner))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cases := []struct {
		name string
		body string
		want Reason
	}{
		{"empty", ``, ReasonTruncated},
		{"not json", `hello`, ReasonNotJSON},
		{"xml", `<notification/>`, ReasonNotJSON},
		{"truncated body", good[:40], ReasonTruncated},
		{"truncated envelope", env(good)[:60], ReasonTruncated},
		{"array", `[1, 2]`, ReasonNotObject},
		{"string", `"x"`, ReasonNotObject},
		{"null inner", `{"oslo.version": "2.0", "oslo.message": "null"}`, ReasonMissingEventType},
		{"envelope message is object", `{"oslo.version": "2.0", "oslo.message": {"event_type": "x"}}`, ReasonEnvelopeNotString},
		{"envelope message is number", `{"oslo.version": "2.0", "oslo.message": 3}`, ReasonEnvelopeNotString},
		{"envelope without message", `{"oslo.version": "2.0"}`, ReasonEnvelopeNotString},
		{"unknown version", `{"oslo.version": "3.0", "oslo.message": "{}"}`, ReasonUnknownVersion},
		{"numeric version", `{"oslo.version": 2.0, "oslo.message": "{}"}`, ReasonUnknownVersion},
		{"message without version", `{"oslo.message": "{}"}`, ReasonUnknownVersion},
		{"inner not json", `{"oslo.version": "2.0", "oslo.message": "nope"}`, ReasonNotJSON},
		{"inner truncated", `{"oslo.version": "2.0", "oslo.message": "{\"event_type\": \"ins"}`, ReasonTruncated},
		{"inner array", `{"oslo.version": "2.0", "oslo.message": "[]"}`, ReasonNotObject},
		{"missing event_type", env(`{"publisher_id": "nova-compute:c1", "payload": {}}`), ReasonMissingEventType},
		{"empty event_type", env(`{"event_type": "", "payload": {}}`), ReasonMissingEventType},
		{"event_type not string", env(`{"event_type": 7, "payload": {}}`), ReasonInvalidField},
		{"invalid utf-8", "{\"event_type\": \"instance.delete.end\xff\"}", ReasonInvalidUTF8},
		{"huge", `{"event_type": "x", "pad": "` + strings.Repeat("a", DefaultMaxBytes) + `"}`, ReasonTooLarge},
		{"bad timestamp", env(`{"event_type": "instance.delete.end", "timestamp": "yesterday", "payload": {}}`), ReasonBadTimestamp},
		{"payload not object", env(`{"event_type": "instance.delete.end", "payload": "x"}`), ReasonBadPayload},
		{"payload missing", env(`{"event_type": "instance.delete.end"}`), ReasonBadPayload},
		{"payload field wrong type", env(`{"event_type": "instance.delete.end", "payload": {"nova_object.data": {"uuid": 5}}}`), ReasonInvalidField},
		{"missing uuid versioned", env(`{"event_type": "instance.delete.end", "payload": {"nova_object.data": {"host": "c1"}}}`), ReasonMissingInstance},
		{"missing uuid legacy", env(`{"event_type": "compute.instance.delete.end", "payload": {"host": "c1"}}`), ReasonMissingInstance},
		{"attach without volume", env(`{"event_type": "instance.volume_attach.end", "payload": {"nova_object.data": {"uuid": "178b0921-8f85-4257-88b6-2e743b5a975c"}}}`), ReasonMissingVolume},
		{"instance uuid is a path", env(`{"event_type": "instance.delete.end", "payload": {"nova_object.data": {"uuid": "../../etc/passwd"}}}`), ReasonInvalidID},
		{"legacy instance id not a uuid", env(`{"event_type": "compute.instance.delete.end", "payload": {"instance_id": "i-1"}}`), ReasonInvalidID},
		{"volume id not a uuid", env(`{"event_type": "instance.volume_attach.end", "payload": {"nova_object.data": {"uuid": "178b0921-8f85-4257-88b6-2e743b5a975c", "volume_id": "../v"}}}`), ReasonInvalidID},
		{"block device volume not a uuid", env(`{"event_type": "instance.delete.end", "payload": {"nova_object.data": {"uuid": "178b0921-8f85-4257-88b6-2e743b5a975c", "block_devices": [{"nova_object.data": {"volume_id": "x"}}]}}}`), ReasonInvalidID},
		{"swap without new volume", env(`{"event_type": "instance.volume_swap.end", "payload": {"nova_object.data": {"uuid": "178b0921-8f85-4257-88b6-2e743b5a975c", "old_volume_id": "a07f71dc-8151-4e7d-a0cc-cd24a3f11113"}}}`), ReasonMissingVolume},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev, err := Decode([]byte(tc.body))
			if err == nil {
				t.Fatalf("decoded %+v, want %s", ev, tc.want)
			}
			if got := ReasonOf(err); got != tc.want {
				t.Errorf("reason %q (%v), want %q", got, err, tc.want)
			}
			if !errors.Is(err, ErrDecode) {
				t.Errorf("%v does not wrap ErrDecode", err)
			}
			if len(err.Error()) > 400 {
				t.Errorf("error message too long (%d bytes): payloads must not end up in logs", len(err.Error()))
			}
		})
	}
	// An unrelated event's payload is not parsed: a garbage payload is fine.
	if ev, err := Decode([]byte(env(`{"event_type": "instance.update", "payload": "x"}`))); err != nil || ev.Relevant() {
		t.Errorf("ignored event with odd payload: %+v, %v", ev, err)
	}
	if _, err := (Decoder{MaxBytes: 10}).Decode([]byte(good)); ReasonOf(err) != ReasonTooLarge {
		t.Errorf("custom limit: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"oslo.version": "2.0", "oslo.message": "{\"event_type\": \"instance.delete.end\", \"payload\": {\"nova_object.data\": {\"uuid\": \"178b0921-8f85-4257-88b6-2e743b5a975c\", \"host\": null}}, \"publisher_id\": \"nova-api:x\"}"}`))
	f.Add([]byte(`{"event_type": "compute.instance.volume.attach", "publisher_id": "compute.c1", "payload": {"instance_id": "178b0921-8f85-4257-88b6-2e743b5a975c", "volume_id": "a07f71dc-8151-4e7d-a0cc-cd24a3f11113"}}`))
	f.Add([]byte(`{"event_type": "instance.volume_swap.end", "payload": {"nova_object.data": {"uuid": "178b0921-8f85-4257-88b6-2e743b5a975c", "old_volume_id": "a07f71dc-8151-4e7d-a0cc-cd24a3f11113", "new_volume_id": "227cc671-f30b-4488-96fd-7d0bf13648d8", "block_devices": [{"nova_object.data": {"volume_id": "227cc671-f30b-4488-96fd-7d0bf13648d8", "boot_index": 0}}]}}}`))
	f.Add([]byte(`{"oslo.version": "2.0", "oslo.message": 1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := Decode(body)
		if err != nil {
			if ReasonOf(err) == "" {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		c, err := Dispatch(ev)
		if err != nil {
			// Decode guarantees the fields Dispatch needs.
			t.Fatalf("decoded event %+v does not dispatch: %v", ev, err)
		}
		if (c != nil) != ev.Relevant() {
			t.Fatalf("relevant=%v but command=%v", ev.Relevant(), c)
		}
	})
}
