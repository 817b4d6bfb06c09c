package admin

import (
	"fmt"
	"os/user"
	"path/filepath"

	"github.com/scour-project/scour/internal/fscheck"
)

// DefaultSocket is where scourd listens and scourctl connects.
const DefaultSocket = "/run/scour/scourd.sock"

// Config is the `admin` section.
type Config struct {
	// Socket is the unix socket's path (default /run/scour/scourd.sock).
	Socket string `yaml:"socket"`
	// Group may use the socket besides root (mode 0660, owner root, this
	// group); empty: root only.
	Group string `yaml:"group"`
}

func (c *Config) SetDefaults() {
	if c.Socket == "" {
		c.Socket = DefaultSocket
	}
}

func (c *Config) Validate() error {
	if !filepath.IsAbs(c.Socket) {
		return fmt.Errorf("admin.socket: %q is not an absolute path", c.Socket)
	}
	if c.Group != "" {
		if _, err := user.LookupGroup(c.Group); err != nil {
			return fmt.Errorf("admin.group: %q: %v (create the group, or leave admin.group empty for root only)", c.Group, err)
		}
	}
	return nil
}

// CheckPaths reports, creating nothing, whether Listen could create the
// socket: its directory must be creatable and writable.
func (c Config) CheckPaths() error {
	if err := fscheck.WritableDir(filepath.Dir(c.Socket)); err != nil {
		return fmt.Errorf("admin.socket %s: %w", c.Socket, err)
	}
	return nil
}
