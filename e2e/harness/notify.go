package harness

import (
	"crypto/rand"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

//go:embed samples/*.json
var samples embed.FS

// Format is the notification format Nova emits ([notifications]
// notification_format): versioned, or the legacy unversioned one.
type Format int

const (
	Versioned Format = iota // payload["nova_object.data"], routing key versioned_notifications.<priority>
	Legacy                  // flat payload, compute.instance.* names, routing key notifications.<priority>
)

func (f Format) String() string {
	if f == Legacy {
		return "legacy"
	}
	return "versioned"
}

// NovaExchange is Nova's control exchange, where notifications are published.
const NovaExchange = "nova"

// Event describes one Nova notification: a sample (by versioned event type or
// sample file name) with the fields a test cares about overridden. Zero
// fields keep the sample's value or get a fresh random one (IDs).
type Event struct {
	Type         string // versioned event type, e.g. "instance.delete.end"; picks samples/instance-delete-end.json
	Sample       string // sample file name without .json when it differs, e.g. "instance-delete-end_compute_down"
	InstanceUUID string
	Host, Node   string
	NullHost     bool   // host and node null, as after shelve_offload or a delete of a never-scheduled instance
	PublisherID  string // default: the sample's service with Host, e.g. "nova-compute:<Host>"
	ProjectID    string
	UserID       string
	RequestID    string    // default: a fresh req-<uuid>
	MessageID    string    // default: a fresh uuid4
	UniqueID     string    // default: a fresh uuid4 hex
	Timestamp    time.Time // default: now
	// ContextTimestamp is when the request that caused the event began
	// (_context_timestamp); default: Timestamp.
	ContextTimestamp time.Time
	Topic            string // default "versioned_notifications" or "notifications"
	Exchange         string // default "nova"
}

// Notification is one notification as it goes on the wire.
type Notification struct {
	Exchange   string
	RoutingKey string
	EventType  string
	MessageID  string
	Message    Object          // the inner oslo message
	Body       []byte          // the envelope bytes, exactly as oslo writes them
	Publishing amqp.Publishing // the properties oslo's rabbit driver sets
}

// BuildNotification renders ev in format f as oslo.messaging's messagingv2
// driver does: inner message serialized with json.dumps into the envelope
// {"oslo.version": "2.0", "oslo.message": "..."}.
func BuildNotification(ev Event, f Format) (*Notification, error) {
	msg, eventType, err := buildMessage(ev, f)
	if err != nil {
		return nil, err
	}
	inner, err := PyDumps(msg)
	if err != nil {
		return nil, err
	}
	body, err := PyDumps(Object{{"oslo.version", "2.0"}, {"oslo.message", string(inner)}})
	if err != nil {
		return nil, err
	}
	topic := ev.Topic
	if topic == "" {
		topic = map[Format]string{Versioned: "versioned_notifications", Legacy: "notifications"}[f]
	}
	exchange := ev.Exchange
	if exchange == "" {
		exchange = NovaExchange
	}
	id, _ := msg.Get("message_id")
	priority, _ := msg.Get("priority")
	return &Notification{
		Exchange:   exchange,
		RoutingKey: topic + "." + strings.ToLower(priority.(string)), // oslo: <topic>.<priority lower-case>
		EventType:  eventType,
		MessageID:  id.(string),
		Message:    msg,
		Body:       body,
		Publishing: amqp.Publishing{
			ContentType:     "application/json",
			ContentEncoding: "utf-8",
			Headers:         amqp.Table{},
			DeliveryMode:    amqp.Persistent,
			Body:            body,
		},
	}, nil
}

// LoadSample returns a sample's top-level object (event_type, payload,
// priority, publisher_id) with its key order.
func LoadSample(name string) (Object, error) {
	b, err := samples.ReadFile("samples/" + name + ".json")
	if err != nil {
		return nil, fmt.Errorf("no Nova notification sample %q in e2e/harness/samples: %w", name, err)
	}
	v, err := ParseOrdered(b)
	if err != nil {
		return nil, fmt.Errorf("sample %s: %w", name, err)
	}
	return v.(Object), nil
}

func sampleName(ev Event) (string, error) {
	switch {
	case ev.Sample != "":
		return ev.Sample, nil
	case ev.Type != "":
		return strings.ReplaceAll(ev.Type, ".", "-"), nil
	}
	return "", fmt.Errorf("event needs Type or Sample")
}

// buildMessage assembles the inner message in the key order of oslo's
// Notifier._notify (message_id, publisher_id, event_type, priority, payload,
// timestamp) then the rabbit driver's _unique_id and _context_* keys.
func buildMessage(ev Event, f Format) (Object, string, error) {
	name, err := sampleName(ev)
	if err != nil {
		return nil, "", err
	}
	s, err := LoadSample(name)
	if err != nil {
		return nil, "", err
	}
	eventType, _ := s.Get("event_type")
	publisher, _ := s.Get("publisher_id")
	priority, _ := s.Get("priority")
	if p, _ := priority.(string); p == "" {
		return nil, "", fmt.Errorf("sample %s has no priority", name)
	}
	payload, _ := s.Get("payload")
	versioned, ok := payload.(Object)
	if !ok {
		return nil, "", fmt.Errorf("sample %s has no object payload", name)
	}
	data, _ := versioned.Get("nova_object.data")
	dataObj, _ := data.(Object)
	applyOverrides(&dataObj, ev)
	versioned.Set("nova_object.data", dataObj)

	et := eventType.(string)
	var body any = versioned
	pub := publisherFor(publisher.(string), ev)
	if f == Legacy {
		et = legacyEventType(et)
		body = legacyPayload(dataObj)
		pub = legacyPublisher(pub)
	}
	msg := Object{
		{"message_id", orDefault(ev.MessageID, uuid4)},
		{"publisher_id", pub},
		{"event_type", et},
		{"priority", priority}, // Nova's: ERROR for *.error, which oslo routes to <topic>.error
		{"payload", body},
		{"timestamp", pyTimestamp(ev.Timestamp)},
		{"_unique_id", orDefault(ev.UniqueID, func() string { return strings.ReplaceAll(uuid4(), "-", "") })},
	}
	for _, m := range novaContext(ev, dataObj) {
		msg = append(msg, Member{"_context_" + m.Key, m.Value})
	}
	return msg, et, nil
}

func applyOverrides(data *Object, ev Event) {
	if ev.InstanceUUID != "" {
		data.Set("uuid", ev.InstanceUUID)
	}
	if ev.Host != "" {
		data.Set("host", ev.Host)
	}
	if ev.Node != "" {
		data.Set("node", ev.Node)
	}
	if ev.NullHost {
		data.Set("host", nil)
		data.Set("node", nil)
	}
	if ev.ProjectID != "" {
		data.Set("tenant_id", ev.ProjectID)
	}
	if ev.UserID != "" {
		data.Set("user_id", ev.UserID)
	}
}

// publisherFor keeps the sample's service ("nova-compute", "nova-api") and
// puts the event's host after it when the notification comes from a compute.
func publisherFor(sample string, ev Event) string {
	if ev.PublisherID != "" {
		return ev.PublisherID
	}
	service, _, _ := strings.Cut(sample, ":")
	if service == "nova-compute" && ev.Host != "" {
		return service + ":" + ev.Host
	}
	return sample
}

func orDefault(v string, gen func() string) string {
	if v != "" {
		return v
	}
	return gen()
}

// uuid4 returns a random RFC 4122 version 4 UUID, as Python's uuid.uuid4().
func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// NewUUID returns a random UUID for instances, consumers and the like.
func NewUUID() string { return uuid4() }

// pyTimestamp renders t as str(datetime.utcnow()): no fraction when the
// microseconds are zero.
func pyTimestamp(t time.Time) string {
	if t.IsZero() {
		t = time.Now()
	}
	t = t.UTC()
	if t.Nanosecond()/1000 == 0 {
		return t.Format("2006-01-02 15:04:05")
	}
	return t.Format("2006-01-02 15:04:05.000000")
}
