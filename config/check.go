package config

import (
	"errors"
	"fmt"

	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
)

// ErrInvalid marks a configuration problem found only as scourd starts
// (the claims store's rows say host must be set): restarting cannot fix
// it, so scourd exits 2 as for any invalid configuration, which its
// systemd unit does not restart.
var ErrInvalid = errors.New("invalid configuration")

// ErrHostNotReady marks a problem Check found on the host rather than in
// the configuration: a plugin missing, not executable or not answering
// VERSION in time, a directory that cannot be created (a file system not
// mounted yet). Installing or mounting what is missing fixes it with no
// change to the configuration, and a plugin's VERSION can time out on a
// host loaded at boot, so a start refused only for these exits 1, which
// systemd restarts: a scourd that stays down fences nothing. --check-config
// lists them with every other problem and exits 2.
var ErrHostNotReady = errors.New("host not ready")

// Check runs the start-up checks that need the host but no network, which
// Validate (values only) cannot make: Placement credentials complete (a
// cleaning scourd needs them), every plugin step's file present, root's,
// executable and answering VERSION, and every directory scourd creates or
// writes at start creatable (claims database, signing key, admin socket,
// simulator state). It creates and changes nothing. getenv supplies the
// OS_* variables, as the process's environment does at start.
//
// scourd runs Validate and Check before it starts and for --check-config,
// and lists the problems of both at once (LoadChecked): what --check-config
// accepts starts, as far as the host can tell without the network.
// Nothing is checked for a dispatch-only scourd beyond Validate: it opens
// no store, runs no plugin and needs no Placement.
func (c *Config) Check(getenv func(string) string) error {
	if c.Lifecycle.Disabled() {
		return nil
	}
	var errs []error
	if err := placement.CheckCredentials(c.Placement, getenv); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w\n(lifecycle.enabled is true: this scourd cleans devices and needs Placement; a dispatch-only scourd sets lifecycle.enabled: false)", ErrInvalid, err))
	}
	if err := pipeline.Preflight(c.Pipelines); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrHostNotReady, err))
	}
	for _, err := range []error{c.Claims.CheckPaths(), c.Admin.CheckPaths(), c.Hardware.CheckPaths()} {
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrHostNotReady, err))
		}
	}
	return errors.Join(errs...)
}
