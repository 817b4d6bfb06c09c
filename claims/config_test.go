package claims

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// section is what the config package requires of scour.yaml's sections.
type section interface {
	SetDefaults()
	Validate() error
}

var _ section = (*Config)(nil)

func TestConfigDefaultsAndValidate(t *testing.T) {
	var c Config
	c.SetDefaults()
	if c.Driver != DriverSQLite || c.SQLitePath() != "/var/lib/scour/claims.sqlite" || c.ClaimExpiry != 300*time.Second || c.RecordRetention != 0 {
		t.Fatalf("defaults = %+v (path %s)", c, c.SQLitePath())
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	tests := []struct {
		name string
		cfg  Config
		want []string // every problem must be reported
	}{
		{"postgres without dsn", Config{Driver: "postgres", ClaimExpiry: time.Minute}, []string{"needs dsn"}},
		{"unknown driver and negatives", Config{Driver: "mysql", ClaimExpiry: -1, RecordRetention: -time.Hour},
			[]string{`unknown driver "mysql"`, "claim_expiry_time -1ns is negative", "record_retention -1h0m0s is negative"}},
		{"sqlite with dsn and tiny expiry", Config{Driver: "sqlite", StatePath: "/x", DSN: "postgres://h/db", ClaimExpiry: time.Second},
			[]string{"dsn is set but driver is sqlite", "shorter than 10s"}},
		{"absolute claim_db", Config{Driver: "sqlite", ClaimDB: "/srv/c.sqlite", ClaimExpiry: time.Minute}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate = nil")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if p := (Config{ClaimDB: "/srv/c.sqlite", StatePath: "/var/lib/scour"}).SQLitePath(); p != "/srv/c.sqlite" {
		t.Errorf("absolute claim_db path = %s", p)
	}
}

func TestSQLiteFileModes(t *testing.T) {
	root := t.TempDir()
	cfg := Config{StatePath: filepath.Join(root, "state", "scour"), ClaimDB: "claims.db"}
	s := mustOpen(t, cfg)
	if _, err := s.RecordClaim(context.Background(), gpuClaim("inst-m", "rp-a")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{
		cfg.StatePath: 0o700 | os.ModeDir,
		filepath.Join(cfg.StatePath, "claims.db"):     0o600,
		filepath.Join(cfg.StatePath, "claims.db-wal"): 0o600,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s mode %v, want %v", path, fi.Mode(), want)
		}
	}
	var mode string
	if err := s.r.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
}

func TestOpenErrorsNameTheDatabase(t *testing.T) {
	ctx := context.Background()
	_, err := Open(ctx, Config{Driver: DriverPostgres, DSN: "postgres://scour:secret@127.0.0.1:1/scour?sslmode=disable&connect_timeout=2"})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("postgres open error = %v; want the address named and the password hidden", err)
	}
	for _, dsn := range []string{
		"host=127.0.0.1 port=1 user=scour password=secret dbname=scour sslmode=disable connect_timeout=2",
		"postgres://scour@127.0.0.1:1/scour?sslmode=disable&connect_timeout=2&password=secret",
	} {
		_, err = Open(ctx, Config{Driver: DriverPostgres, DSN: dsn})
		if err == nil || !strings.Contains(err.Error(), "127.0.0.1") || strings.Contains(err.Error(), "secret") {
			t.Fatalf("postgres open error = %v; want the address named and the password hidden", err)
		}
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	_, err = Open(ctx, Config{StatePath: filepath.Join(file, "sub")})
	if err == nil || !strings.Contains(err.Error(), "state directory") {
		t.Fatalf("sqlite open under a file = %v", err)
	}
}

func TestConfigFromYAML(t *testing.T) {
	var c Config
	doc := "driver: postgres\ndsn: postgres://scour@db:5432/scour\nclaim_expiry_time: 10m\nrecord_retention: 8760h\n"
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatal(err)
	}
	c.SetDefaults()
	want := Config{Driver: DriverPostgres, DSN: "postgres://scour@db:5432/scour", StatePath: DefaultStatePath, ClaimDB: DefaultClaimDB,
		ClaimExpiry: 10 * time.Minute, RecordRetention: 365 * 24 * time.Hour, SigningKey: DefaultSigningKey}
	if c != want {
		t.Fatalf("YAML config = %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
