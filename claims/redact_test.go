package claims

import (
	"strings"
	"testing"
)

// Both libpq forms lose every password, however it is written; the rest
// stays readable for the operator.
func TestRedactDSN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://scour:hunter2@db:5432/scour?sslmode=verify-full", "postgres://scour:xxxxx@db:5432/scour?sslmode=verify-full"},
		{"postgres://scour@db/scour?password=hunter2", "postgres://scour@db/scour?password=xxxxx"},
		{"postgresql://scour@db/scour?sslmode=require&sslpassword=hunter2&pass%77ord=hunter2", "postgresql://scour@db/scour?sslmode=require&sslpassword=xxxxx&pass%77ord=xxxxx"},
		{"postgres://scour:hun:ter2@db1:5432,db2:5432/scour", "postgres://scour:xxxxx@db1:5432,db2:5432/scour"},
		{"postgres://scour:hunter2?@db/scour", "postgres://scour:xxxxx@db/scour"},
		{"postgres://scour:hun/ter2@db/scour", "postgres://(rest hidden: an '@' outside user:password@; percent-encode it as %40)"},
		{"postgres://scour:hun@ter2@db/scour", "postgres://scour:xxxxx@(rest hidden: an '@' outside user:password@; percent-encode it as %40)"},
		{"postgres://db/scour", "postgres://db/scour"},
		{"host=db user=scour password=hunter2 dbname=scour", "host=db user=scour password=xxxxx dbname=scour"},
		{"host=db password = 'hunter 2\\' x' sslpassword=hunter2 dbname=scour", "host=db password=xxxxx sslpassword=xxxxx dbname=scour"},
		{"host=db password=hun\\ ter2 dbname='my db'", "host=db password=xxxxx dbname='my db'"},
		{"host=db password='hunter2", "host=db (rest hidden: not key=value)"},
		{"host=db password hunter2", "host=db (rest hidden: not key=value)"},
		{"host=db password=hunter2\\", "host=db (rest hidden: not key=value)"},
		{"", ""},
	} {
		got := RedactDSN(tc.dsn)
		if got != tc.want {
			t.Errorf("RedactDSN(%q)\n got %q\nwant %q", tc.dsn, got, tc.want)
		}
		if strings.Contains(got, "hunter") || strings.Contains(got, "ter2") {
			t.Errorf("RedactDSN(%q) leaks the password: %q", tc.dsn, got)
		}
	}
}
