package broker

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want URL
	}{
		{"rabbit://nova:s3cret@h1:5672,nova:s3cret@h2:5673/nova", URL{Scheme: "rabbit", Vhost: "nova", Endpoints: []Endpoint{
			{Addr: "h1:5672", Host: "h1", User: "nova", Password: "s3cret"}, {Addr: "h2:5673", Host: "h2", User: "nova", Password: "s3cret"}}}},
		{"rabbit://guest:guest@127.0.0.1:5672/", URL{Scheme: "rabbit", Vhost: "/", Endpoints: []Endpoint{{Addr: "127.0.0.1:5672", Host: "127.0.0.1", User: "guest", Password: "guest"}}}},
		{"amqp://u:p%40ss@rmq/%2f", URL{Scheme: "amqp", Vhost: "/", Endpoints: []Endpoint{{Addr: "rmq:5672", Host: "rmq", User: "u", Password: "p@ss"}}}},
		{"amqps://u:p@[::1]:5671/v", URL{Scheme: "amqps", TLS: true, Vhost: "v", Endpoints: []Endpoint{{Addr: "[::1]:5671", Host: "::1", User: "u", Password: "p"}}}},
		{"amqps://u:p@rmq", URL{Scheme: "amqps", TLS: true, Vhost: "/", Endpoints: []Endpoint{{Addr: "rmq:5671", Host: "rmq", User: "u", Password: "p"}}}},
		{"rabbit://u:p@rmq:5671/?ssl=1", URL{Scheme: "rabbit", TLS: true, Vhost: "/", Endpoints: []Endpoint{{Addr: "rmq:5671", Host: "rmq", User: "u", Password: "p"}}}},
	}
	for _, tc := range cases {
		got, err := ParseURL(tc.in)
		if err != nil {
			t.Errorf("%s: %v", Redact(tc.in), err)
			continue
		}
		if d := cmp.Diff(&tc.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", Redact(tc.in), d)
		}
		if strings.Contains(got.String(), "s3cret") || strings.Contains(got.String(), ":p@") {
			t.Errorf("String() leaks the password: %s", got)
		}
	}
}

func TestParseURLErrorsHidePasswords(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"http://u:hunter2@h/", "rabbit://u:hunter2@/v", "u:hunter2@h", "rabbit://u:hunter2@h1,/v"} {
		_, err := ParseURL(in)
		if err == nil {
			t.Errorf("%s: no error", Redact(in))
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error leaks the password: %v", err)
		}
	}
	u, _ := ParseURL("rabbit://a:x@h1,b:y@h2/")
	if err := u.Validate(); err == nil || !strings.Contains(err.Error(), "other credentials") || strings.Contains(err.Error(), "x@") {
		t.Errorf("mixed credentials: %v", err)
	}
	if got := Redact("rabbit://a:x@h1,b:y@h2/v"); got != "rabbit://a:***@h1,b:***@h2/v" {
		t.Errorf("Redact = %s", got)
	}
}
