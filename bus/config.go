package bus

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/scour-project/scour/bus/broker"
)

// Modes of the notification path.
const (
	// ModeDispatch: consume Nova's notifications from the shared queue
	// (competing consumers), dispatch commands to per-host queues, and
	// consume this host's queue. The default.
	ModeDispatch = "dispatch"
	// ModeDirect: consume a per-compute notification topic (Nova's sample
	// listener recommends notifications-<host>) and hand commands for this
	// host straight to the handler: no dispatch hop, no scour exchange.
	ModeDirect = "direct"
)

// DefaultNotificationsQueue is bus.notifications_queue's default.
const DefaultNotificationsQueue = "scour.notifications"

// HostPlaceholder in bus.notifications_queue is replaced by the host
// (direct mode only).
const HostPlaceholder = "{host}"

// Values of Config.BroadcastRouting.
const (
	RoutingAuto      = "auto"
	RoutingClaims    = "claims"
	RoutingBroadcast = "broadcast"
)

// Config is the `bus` section of scour.yaml.
type Config struct {
	// URL of the broker: Nova's transport_url form
	// rabbit://user:pass@h1:5672,user:pass@h2:5672/vhost, or amqp(s)://.
	URL string           `yaml:"url"`
	TLS broker.TLSConfig `yaml:"tls"`
	// Heartbeat interval of the AMQP connection.
	Heartbeat time.Duration `yaml:"heartbeat"`
	Mode      string        `yaml:"mode"`

	Nova NovaConfig `yaml:"nova"`

	// NotificationsQueue is scour's own queue bound to Nova's exchange;
	// every scourd consumes it as a competing consumer. In direct mode each
	// host needs a queue of its own (a shared one would hand a host the
	// others' notifications, which it acks and ignores): the default
	// becomes scour.notifications.<host>, and another name must contain
	// HostPlaceholder, which is replaced by the host (NotificationsQueueOf).
	NotificationsQueue string `yaml:"notifications_queue"`
	// ClassicQueues declares scour's own queues as classic durable queues
	// instead of quorum queues (the default: replicated, RabbitMQ >= 3.8).
	ClassicQueues bool `yaml:"classic_queues"`
	// Exchange is scour's own durable topic exchange for commands.
	Exchange string `yaml:"exchange"`
	// HostQueuePrefix + host names this host's command queue.
	HostQueuePrefix string `yaml:"host_queue_prefix"`
	// BroadcastKey is the routing key of instance-scoped broadcasts.
	BroadcastKey string `yaml:"broadcast_routing_key"`
	// BroadcastRouting says where the dispatcher sends an instance-scoped
	// broadcast (revert, evacuate, a delete without a host): RoutingClaims
	// sends it only to the hosts holding a live claim of the instance, as
	// the claims database says, and to every host when it names none or
	// cannot be read; RoutingBroadcast always to every host; RoutingAuto
	// (the default) is RoutingClaims when the claims store is PostgreSQL,
	// else RoutingBroadcast. The application resolves it (app.New).
	BroadcastRouting string `yaml:"broadcast_routing"`
	// PoisonQueue receives every message that can never be processed,
	// with the reason in the x-scour-poison-reason header.
	PoisonQueue string `yaml:"poison_queue"`

	// Prefetch is the AMQP QoS prefetch count per consumer channel: how
	// many deliveries one consumer channel holds at once. A dispatched
	// notification stays unacked until the broker confirmed its command
	// (milliseconds on a quorum queue), so a small window, not the CPU,
	// caps the dispatch rate (see docs/operations.md, "Ingest
	// throughput"). It does not bound handler work: HandlerConcurrency does.
	Prefetch int `yaml:"prefetch"`
	// HandlerConcurrency bounds the commands this process runs through
	// the CommandHandler at once (host queue intake, or direct mode); each
	// may call Placement and the claims store.
	HandlerConcurrency int `yaml:"handler_concurrency"`
	// Workers is the number of consumer channels per queue; at most
	// Workers x Prefetch messages of a queue are in flight.
	Workers int `yaml:"workers"`
	// MaxMessageBytes bounds a notification body (larger: poisoned).
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// DeliveryLimit is the quorum queues' x-delivery-limit: a message
	// requeued this many times (a handler failing transiently for a long
	// outage) is dead-lettered to the poison queue instead of looping
	// forever or, on RabbitMQ 4's default limit, being dropped. Default
	// 1000 (about an hour of retries); ignored with classic_queues.
	DeliveryLimit int `yaml:"delivery_limit"`

	Retry RetryConfig `yaml:"retry"`
	// ShutdownTimeout bounds how long in-flight messages may finish on
	// SIGTERM before they are requeued.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
}

// NovaConfig describes Nova's side of the broker, which scour must match.
type NovaConfig struct {
	// Exchange is Nova's control exchange ([DEFAULT] control_exchange).
	Exchange string `yaml:"exchange"`
	// Durable must equal Nova's [oslo_messaging_rabbit] amqp_durable_queues
	// (default false): declaring with other flags fails with 406.
	Durable bool `yaml:"durable"`
	// Passive only checks that the exchange exists (never creates it).
	Passive bool `yaml:"passive"`
	// RoutingKeys bound to scour's queue: <topic>.info and <topic>.error
	// for each of Nova's [oslo_messaging_notifications] topics. oslo routes
	// a notification by its priority (<topic>.<priority lower-case>), and
	// Nova sends instance.create.error / compute.instance.create.error at
	// priority ERROR.
	RoutingKeys []string `yaml:"routing_keys"`
}

// Notes are advice about a valid configuration that probably does not do
// what the operator wants (scourd --check-config prints them, scourd logs
// them at start): a <topic>.info routing key bound without its
// <topic>.error, so a failed build's create.error, which Nova sends at
// priority ERROR, never reaches scour.
func (c *Config) Notes() []string {
	var notes []string
	for _, k := range c.Nova.RoutingKeys {
		topic, ok := strings.CutSuffix(k, ".info")
		if !ok || slices.Contains(c.Nova.RoutingKeys, topic+".error") {
			continue
		}
		notes = append(notes, fmt.Sprintf("bus.nova.routing_keys binds %s but not %s.error: Nova sends instance.create.error (a failed build) at priority ERROR on %s.error, so scour misses it and the burned device waits for the periodic scan; add %s.error",
			k, topic, topic, topic))
	}
	return notes
}

// RetryConfig is the in-process backoff for transient failures (a publish
// not confirmed, a handler's downstream unavailable) before the message is
// nacked and requeued.
type RetryConfig struct {
	Attempts int           `yaml:"attempts"`
	Initial  time.Duration `yaml:"initial"`
	Max      time.Duration `yaml:"max"`
}

// SetDefaults fills unset fields.
func (c *Config) SetDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.URL, "rabbit://guest:guest@127.0.0.1:5672/")
	def(&c.Mode, ModeDispatch)
	def(&c.Nova.Exchange, "nova")
	def(&c.NotificationsQueue, DefaultNotificationsQueue)
	def(&c.Exchange, "scour")
	def(&c.HostQueuePrefix, "scour.host.")
	def(&c.BroadcastKey, "broadcast.instance")
	def(&c.PoisonQueue, "scour.poison")
	def(&c.BroadcastRouting, RoutingAuto)
	if c.Nova.RoutingKeys == nil {
		c.Nova.RoutingKeys = []string{"versioned_notifications.info", "versioned_notifications.error", "notifications.info", "notifications.error"}
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 10 * time.Second
	}
	if c.Prefetch == 0 {
		c.Prefetch = 128
	}
	if c.HandlerConcurrency == 0 {
		c.HandlerConcurrency = 64
	}
	if c.Workers == 0 {
		c.Workers = 2
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = 1 << 20
	}
	if c.DeliveryLimit == 0 {
		c.DeliveryLimit = 1000
	}
	if c.Retry.Attempts == 0 {
		c.Retry.Attempts = 5
	}
	if c.Retry.Initial == 0 {
		c.Retry.Initial = 200 * time.Millisecond
	}
	if c.Retry.Max == 0 {
		c.Retry.Max = 5 * time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 20 * time.Second
	}
}

// Validate reports every problem, naming the key (relative to `bus`).
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("bus.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if u, err := broker.ParseURL(c.URL); err != nil {
		bad("url", "%v", err)
	} else if err := u.Validate(); err != nil {
		bad("url", "%s: %v", u, err)
	}
	if c.Mode != ModeDispatch && c.Mode != ModeDirect {
		bad("mode", "%q is not %q or %q", c.Mode, ModeDispatch, ModeDirect)
	}
	for key, v := range map[string]string{
		"nova.exchange": c.Nova.Exchange, "notifications_queue": c.NotificationsQueue, "exchange": c.Exchange,
		"host_queue_prefix": c.HostQueuePrefix, "broadcast_routing_key": c.BroadcastKey, "poison_queue": c.PoisonQueue,
	} {
		if strings.TrimSpace(v) == "" || len(v) > 200 {
			bad(key, "must be 1 to 200 characters")
		}
	}
	hasHost := strings.Contains(c.NotificationsQueue, HostPlaceholder)
	switch {
	case c.Mode == ModeDirect && !hasHost && c.NotificationsQueue != DefaultNotificationsQueue:
		bad("notifications_queue", "%q in direct mode would be one queue for every host: each scourd would take, ack and ignore "+
			"the other hosts' notifications. Name one queue per host with %s, e.g. %q (or remove the key: the default is %s.<host>); "+
			"once every host runs the new name, delete the old queue %q if it exists (rabbitmqctl delete_queue): still bound to Nova's exchange, it fills up",
			c.NotificationsQueue, HostPlaceholder, c.NotificationsQueue+"."+HostPlaceholder, DefaultNotificationsQueue, c.NotificationsQueue)
	case c.Mode != ModeDirect && hasHost:
		bad("notifications_queue", "%q: %s is for direct mode only; in dispatch mode every scourd shares one queue "+
			"(a queue per host would dispatch every notification once per host)", c.NotificationsQueue, HostPlaceholder)
	}
	switch c.BroadcastRouting {
	case RoutingAuto, RoutingClaims, RoutingBroadcast:
	default:
		bad("broadcast_routing", "%q is not %q, %q or %q", c.BroadcastRouting, RoutingAuto, RoutingClaims, RoutingBroadcast)
	}
	if c.Nova.Exchange == c.Exchange {
		bad("exchange", "scour's exchange must differ from Nova's (%q)", c.Nova.Exchange)
	}
	if c.Nova.Passive && c.Nova.Durable {
		bad("nova.passive", "passive declare ignores nova.durable: set only one")
	}
	if len(c.Nova.RoutingKeys) == 0 {
		bad("nova.routing_keys", "at least one routing key (e.g. versioned_notifications.info)")
	}
	for _, k := range c.Nova.RoutingKeys {
		if k == "" {
			bad("nova.routing_keys", "empty routing key")
		}
		// Never share oslo's own queue: its name equals the routing key.
		if k == c.NotificationsQueue {
			bad("notifications_queue", "%q is oslo's own queue for that routing key; scour needs a queue of its own", k)
		}
	}
	if c.Prefetch < 1 || c.Prefetch > 65535 {
		bad("prefetch", "%d is outside 1..65535", c.Prefetch)
	}
	if c.HandlerConcurrency < 1 || c.HandlerConcurrency > 65535 {
		bad("handler_concurrency", "%d is outside 1..65535", c.HandlerConcurrency)
	}
	if c.Workers < 1 || c.Workers > 256 {
		bad("workers", "%d is outside 1..256", c.Workers)
	}
	if c.DeliveryLimit < 1 {
		bad("delivery_limit", "%d is below 1", c.DeliveryLimit)
	}
	if c.MaxMessageBytes < 1024 {
		bad("max_message_bytes", "%d is below 1024", c.MaxMessageBytes)
	}
	if c.Retry.Attempts < 1 || c.Retry.Initial <= 0 || c.Retry.Max < c.Retry.Initial {
		bad("retry", "attempts >= 1 and 0 < initial <= max required")
	}
	if c.Heartbeat < time.Second {
		bad("heartbeat", "%s is below 1s", c.Heartbeat)
	}
	if c.ShutdownTimeout <= 0 {
		bad("shutdown_timeout", "must be positive")
	}
	for key, f := range map[string]string{"tls.ca_file": c.TLS.CAFile, "tls.cert_file": c.TLS.CertFile, "tls.key_file": c.TLS.KeyFile} {
		if f != "" {
			if _, err := os.Stat(f); err != nil {
				bad(key, "%v", err)
			}
		}
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		bad("tls", "cert_file and key_file go together")
	}
	return errors.Join(errs...)
}

// NotificationsQueueOf is the notifications queue host consumes: the
// shared one in dispatch mode; in direct mode the default name with
// .<host> appended, or the name with HostPlaceholder replaced by host.
func (c *Config) NotificationsQueueOf(host string) string {
	switch {
	case c.Mode != ModeDirect:
		return c.NotificationsQueue
	case c.NotificationsQueue == DefaultNotificationsQueue:
		return c.NotificationsQueue + "." + host
	}
	return strings.ReplaceAll(c.NotificationsQueue, HostPlaceholder, host)
}

// HostQueue is the command queue of host.
func (c *Config) HostQueue(host string) string { return c.HostQueuePrefix + host }

// HostKey is the routing key of commands for host.
func HostKey(host string) string { return "host." + host }
