package claims

import (
	"net/url"
	"strings"
)

// dsnMask replaces a password in RedactDSN's output.
const dsnMask = "xxxxx"

// RedactDSN returns dsn safe to print: every password (user:PASSWORD@,
// password= and sslpassword=) masked, in whichever of libpq's two forms
// dsn is written (postgres://... or key=value pairs, pgx's rule for
// telling them apart). Where the form is too malformed to know where a
// password ends, it hides more, never less.
func RedactDSN(dsn string) string {
	for _, scheme := range []string{"postgres://", "postgresql://"} {
		if rest, ok := strings.CutPrefix(dsn, scheme); ok {
			return scheme + redactURLDSN(rest)
		}
	}
	return redactKeywordDSN(dsn)
}

// redactURLDSN masks p, a DSN URL after its scheme. Like libpq and pgx,
// the userinfo is what precedes an '@' met before any '/'. An '@' left
// after it means the password held an unencoded '/' or '@' (or the query
// holds one): then nobody can tell where the password ends, and the rest
// is hidden.
func redactURLDSN(p string) string {
	var b strings.Builder
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		user, _, hasPassword := strings.Cut(p[:i], ":")
		b.WriteString(user)
		if hasPassword {
			b.WriteString(":" + dsnMask)
		}
		b.WriteByte('@')
		p = p[i+1:]
	}
	if strings.Contains(p, "@") {
		b.WriteString("(rest hidden: an '@' outside user:password@; percent-encode it as %40)")
		return b.String()
	}
	base, query, hasQuery := strings.Cut(p, "?")
	b.WriteString(base)
	if !hasQuery {
		return b.String()
	}
	b.WriteByte('?')
	for i, pair := range strings.Split(query, "&") {
		if i > 0 {
			b.WriteByte('&')
		}
		raw, _, hasValue := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(raw)
		if err != nil {
			key = raw
		}
		if hasValue && secretKey(key) {
			pair = raw + "=" + dsnMask
		}
		b.WriteString(pair)
	}
	return b.String()
}

// redactKeywordDSN masks a key=value DSN ("host=db password='a b'"),
// tokenized as libpq does: spaces around '=', values single-quoted or
// bare, a backslash escaping the next character in either. From the first
// pair it cannot read on, the rest is hidden.
func redactKeywordDSN(s string) string {
	var out []string
	for {
		s = strings.TrimLeft(s, " \t\n\r\f\v")
		if s == "" {
			return strings.Join(out, " ")
		}
		key, value, rest, ok := nextPair(s)
		if !ok {
			return strings.Join(append(out, "(rest hidden: not key=value)"), " ")
		}
		if secretKey(key) {
			value = dsnMask
		}
		out = append(out, key+"="+value)
		s = rest
	}
}

// nextPair splits the first key=value of s; value is as written (quotes
// and escapes kept).
func nextPair(s string) (key, value, rest string, ok bool) {
	i := strings.IndexAny(s, "= \t\n\r\f\v")
	if i <= 0 {
		return "", "", "", false
	}
	key, s = s[:i], strings.TrimLeft(s[i:], " \t\n\r\f\v")
	if !strings.HasPrefix(s, "=") {
		return "", "", "", false
	}
	s = strings.TrimLeft(s[1:], " \t\n\r\f\v")
	quoted := strings.HasPrefix(s, "'")
	j := 0
	if quoted {
		j = 1
	}
	for ; j < len(s); j++ {
		switch c := s[j]; {
		case c == '\\':
			j++ // the escaped character, whatever it is
		case quoted && c == '\'':
			return key, s[:j+1], s[j+1:], true
		case !quoted && strings.IndexByte(" \t\n\r\f\v", c) >= 0:
			return key, s[:j], s[j:], true
		}
	}
	if quoted || j > len(s) {
		return "", "", "", false // unterminated quote or a trailing backslash
	}
	return key, s, "", true
}

// secretKey reports the DSN keys that hold a secret: password and
// sslpassword (the client key's passphrase).
func secretKey(key string) bool {
	return strings.Contains(strings.ToLower(key), "password")
}
