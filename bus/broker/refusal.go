package broker

import (
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// AccessError is the broker refusing scour's login: wrong user or password
// (403 ACCESS_REFUSED) or a vhost that is missing or not permitted to the
// user (530 NOT_ALLOWED, or 403 on the vhost). Retrying cannot fix it, so
// connect gives up after refusalAttempts refusals in a row (a few seconds:
// long enough for a user being created at the same time) and scourd exits
// with EX_CONFIG instead of warning forever.
type AccessError struct {
	Broker string // redacted URL
	Vhost  string
	Err    *amqp.Error
}

// refusalAttempts is how many refused logins in a row connect accepts
// before it returns an *AccessError (with the backoff, about 4 s).
const refusalAttempts = 4

func (e *AccessError) Error() string {
	return fmt.Sprintf("broker %s refused the login with %d %s: %s; %s", e.Broker, e.Err.Code, refusalName(e.Err.Code), e.Err.Reason, e.Fix())
}

func (e *AccessError) Unwrap() error { return e.Err }

// Fix tells the operator what to change.
func (e *AccessError) Fix() string {
	if e.vhost() {
		return fmt.Sprintf("create vhost %q or give the user access to it (rabbitmqctl add_vhost %s; rabbitmqctl set_permissions -p %s USER ...), or fix the vhost in bus.url (SCOUR_BUS_URL); see docs/operations.md, RabbitMQ permissions",
			e.Vhost, e.Vhost, e.Vhost)
	}
	return "check the user and password in bus.url (SCOUR_BUS_URL) against the broker (rabbitmqctl authenticate_user USER PASSWORD); see docs/operations.md, RabbitMQ permissions"
}

func (e *AccessError) vhost() bool {
	return e.Err.Code == amqp.NotAllowed || strings.Contains(strings.ToLower(e.Err.Reason), "vhost")
}

func refusalName(code int) string {
	if code == amqp.NotAllowed {
		return "NOT_ALLOWED"
	}
	return "ACCESS_REFUSED"
}

// asAccessError classifies a dial error: a login or vhost refusal becomes
// an *AccessError, anything else (broker down, connection limit) is nil.
func asAccessError(err error, broker, vhost string) *AccessError {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return nil
	}
	switch {
	case ae.Code == amqp.AccessRefused:
	case ae.Code == amqp.NotAllowed && strings.Contains(strings.ToLower(ae.Reason), "vhost"):
	default:
		return nil
	}
	return &AccessError{Broker: broker, Vhost: vhost, Err: ae}
}

// vhostOf is the vhost url names ("/" when it names none).
func vhostOf(url string) string {
	if u, err := ParseURL(url); err == nil && u.Vhost != "" {
		return u.Vhost
	}
	return "/"
}
