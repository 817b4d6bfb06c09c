package claims

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// Drivers this package can open.
const (
	DriverSQLite   = "sqlite"
	DriverPostgres = "postgres"
)

// Defaults applied by setDefaults.
const (
	DefaultStatePath   = "/var/lib/scour"
	DefaultClaimDB     = "claims.sqlite"
	DefaultClaimExpiry = 300 * time.Second
	DefaultSigningKey  = "record-signing.key"
)

// Config selects and tunes the store. The YAML keys are the ones operators
// see in scourd's configuration (docs/claims.md).
type Config struct {
	// Driver is "sqlite" (default, embedded, one file per host) or
	// "postgres" (central database shared by every host).
	Driver string `yaml:"driver"`
	// StatePath is scour's state directory; the sqlite file lives in it.
	StatePath string `yaml:"state_path"`
	// ClaimDB is the sqlite file name, relative to StatePath unless absolute.
	ClaimDB string `yaml:"claim_db"`
	// DSN is the PostgreSQL connection string (driver "postgres" only).
	DSN string `yaml:"dsn"`
	// ClaimExpiry is how old an active claim without a Placement allocation
	// must be before the orphan sweep releases it (claim_expiry_time).
	ClaimExpiry time.Duration `yaml:"claim_expiry_time"`
	// RecordRetention is how long finished cleaning records are kept; zero
	// keeps them forever (the default: they are the proof of sanitization).
	RecordRetention time.Duration `yaml:"record_retention"`
	// PurgeUnexported lets retention delete records that were never
	// exported (scourctl records export); by default it keeps them.
	PurgeUnexported bool `yaml:"purge_unexported"`
	// SigningKey is the host's record-signing key (Ed25519, PEM), created
	// by scourd at first start; default <state_path>/record-signing.key.
	// Its public key is written next to it as <signing_key>.pub.
	SigningKey string `yaml:"signing_key"`
}

// SetDefaults fills every unset field (the config package calls it on the
// "claims" section of scour.yaml).
func (c *Config) SetDefaults() { c.setDefaults() }

func (c *Config) setDefaults() {
	if c.Driver == "" {
		c.Driver = DriverSQLite
	}
	if c.StatePath == "" {
		c.StatePath = DefaultStatePath
	}
	if c.ClaimDB == "" {
		c.ClaimDB = DefaultClaimDB
	}
	if c.ClaimExpiry == 0 {
		c.ClaimExpiry = DefaultClaimExpiry
	}
	if c.SigningKey == "" {
		c.SigningKey = DefaultSigningKey
	}
}

// SigningKeyPath is the signing key file the configuration names.
func (c Config) SigningKeyPath() string {
	if filepath.IsAbs(c.SigningKey) {
		return c.SigningKey
	}
	return filepath.Join(c.StatePath, c.SigningKey)
}

// Validate reports every problem in the configuration, not just the first.
func (c Config) Validate() error {
	var errs []error
	switch c.Driver {
	case DriverSQLite:
		if c.StatePath == "" && !filepath.IsAbs(c.ClaimDB) {
			errs = append(errs, errors.New("claims: state_path is empty and claim_db is not absolute; set state_path (e.g. /var/lib/scour)"))
		}
		if c.DSN != "" {
			errs = append(errs, errors.New("claims: dsn is set but driver is sqlite; set driver: postgres to use it, or remove dsn"))
		}
	case DriverPostgres:
		if c.DSN == "" {
			errs = append(errs, errors.New("claims: driver postgres needs dsn (e.g. postgres://scour@db.example:5432/scour)"))
		}
	default:
		errs = append(errs, fmt.Errorf("claims: unknown driver %q; use %q or %q", c.Driver, DriverSQLite, DriverPostgres))
	}
	if c.ClaimExpiry < 0 {
		errs = append(errs, fmt.Errorf("claims: claim_expiry_time %s is negative", c.ClaimExpiry))
	} else if c.ClaimExpiry > 0 && c.ClaimExpiry < 10*time.Second {
		errs = append(errs, fmt.Errorf("claims: claim_expiry_time %s is shorter than 10s; Placement allocations may lag notifications by that much", c.ClaimExpiry))
	}
	if c.RecordRetention < 0 {
		errs = append(errs, fmt.Errorf("claims: record_retention %s is negative; use 0 to keep records forever", c.RecordRetention))
	}
	return errors.Join(errs...)
}

// SQLitePath is the sqlite file the configuration names.
func (c Config) SQLitePath() string {
	if filepath.IsAbs(c.ClaimDB) {
		return c.ClaimDB
	}
	return filepath.Join(c.StatePath, c.ClaimDB)
}
