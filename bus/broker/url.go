package broker

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Endpoint is one broker address of a (possibly multi-host) URL.
type Endpoint struct {
	Addr     string // host:port
	Host     string // for TLS server name verification
	User     string
	Password string
}

// URL is a parsed broker address. It accepts Nova's transport_url
// form, rabbit://user:pass@h1:5672,user:pass@h2:5672/vhost, and the
// amqp:// / amqps:// forms of the AMQP URI spec (one or several hosts).
type URL struct {
	Scheme    string // rabbit | amqp | amqps
	Endpoints []Endpoint
	Vhost     string
	TLS       bool // amqps://, or rabbit://...?ssl=1
}

// ParseURL parses s. Errors never contain the password.
func ParseURL(s string) (*URL, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return nil, fmt.Errorf("broker url %q: want rabbit://, amqp:// or amqps://", Redact(s))
	}
	u := &URL{Scheme: strings.ToLower(scheme)}
	var defPort string
	switch u.Scheme {
	case "rabbit", "amqp":
		defPort = "5672"
	case "amqps":
		defPort, u.TLS = "5671", true
	default:
		return nil, fmt.Errorf("broker url %q: unsupported scheme %q (want rabbit, amqp or amqps)", Redact(s), scheme)
	}
	hosts, path, _ := strings.Cut(rest, "/")
	path, query, _ := strings.Cut(path, "?")
	if q, err := url.ParseQuery(query); err == nil {
		switch strings.ToLower(q.Get("ssl")) {
		case "1", "true", "yes":
			u.TLS = true
		}
	}
	vhost, err := url.PathUnescape(path)
	if err != nil {
		return nil, fmt.Errorf("broker url %q: bad vhost: %v", Redact(s), err)
	}
	// oslo: an empty path or "/" means the default vhost "/".
	if vhost == "" {
		vhost = "/"
	}
	u.Vhost = vhost
	for _, h := range strings.Split(hosts, ",") {
		ep, err := parseEndpoint(h, defPort)
		if err != nil {
			return nil, fmt.Errorf("broker url %q: %w", Redact(s), err)
		}
		u.Endpoints = append(u.Endpoints, ep)
	}
	return u, nil
}

func parseEndpoint(s, defPort string) (Endpoint, error) {
	var ep Endpoint
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		cred := s[:at]
		s = s[at+1:]
		user, pass, _ := strings.Cut(cred, ":")
		var err1, err2 error
		ep.User, err1 = url.PathUnescape(user)
		ep.Password, err2 = url.PathUnescape(pass)
		if err := errors.Join(err1, err2); err != nil {
			return ep, errors.New("bad percent-encoding in credentials")
		}
	}
	if s == "" {
		return ep, errors.New("empty host")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		host, port = strings.Trim(s, "[]"), defPort
	}
	if host == "" {
		return ep, errors.New("empty host")
	}
	ep.Host, ep.Addr = host, net.JoinHostPort(host, port)
	return ep, nil
}

// Validate reports problems scour cannot work around.
func (u *URL) Validate() error {
	var errs []error
	for _, ep := range u.Endpoints[1:] {
		if ep.User != u.Endpoints[0].User || ep.Password != u.Endpoints[0].Password {
			errs = append(errs, fmt.Errorf("host %s has other credentials than %s: scour uses one set of credentials for every host of the url", ep.Addr, u.Endpoints[0].Addr))
		}
	}
	if u.Endpoints[0].User == "" {
		errs = append(errs, errors.New("no user in the url (write user:password@host)"))
	}
	return errors.Join(errs...)
}

// String is the URL with passwords replaced by "***": safe to log.
func (u *URL) String() string {
	var hosts []string
	for _, ep := range u.Endpoints {
		h := ep.Addr
		if ep.User != "" {
			h = url.PathEscape(ep.User) + ":***@" + h
		}
		hosts = append(hosts, h)
	}
	return u.Scheme + "://" + strings.Join(hosts, ",") + "/" + url.PathEscape(u.Vhost)
}

// Redact hides every password of a raw URL string (user:PASS@host).
func Redact(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		if strings.Contains(s, "@") {
			return "***"
		}
		return s
	}
	hosts, tail, hasTail := strings.Cut(rest, "/")
	parts := strings.Split(hosts, ",")
	for i, p := range parts {
		at := strings.LastIndexByte(p, '@')
		if at < 0 {
			continue
		}
		user, _, _ := strings.Cut(p[:at], ":")
		parts[i] = user + ":***" + p[at:]
	}
	out := scheme + "://" + strings.Join(parts, ",")
	if hasTail {
		out += "/" + tail
	}
	return out
}
