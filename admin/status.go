package admin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/placement"
)

// DeviceStatus is one device of the host as an operator wants to see it.
type DeviceStatus struct {
	Address     string     `json:"address"`
	RP          string     `json:"rp"`
	Name        string     `json:"name"`
	State       string     `json:"state"` // Placement's state, with scour's why
	Reserved    int        `json:"reserved"`
	Total       int        `json:"total"`
	Quarantined bool       `json:"quarantined"`
	LastRun     string     `json:"last_run,omitempty"`
	Verdict     string     `json:"verdict,omitempty"`
	Ended       *time.Time `json:"ended,omitempty"`
	OpenRun     string     `json:"open_run,omitempty"`
	OpenSince   *time.Time `json:"open_since,omitempty"`
	Held        string     `json:"held,omitempty"`    // the store's open quarantine or retirement: its reason
	Step        string     `json:"step,omitempty"`    // the open run's current step
	Percent     *int       `json:"percent,omitempty"` // its progress
	ETA         *time.Time `json:"eta,omitempty"`     // when it ends at the pace so far
}

// Runs is the part of the claims store Status reads.
type Runs interface {
	ListRuns(ctx context.Context, f claims.RunFilter) ([]claims.Run, error)
	Steps(ctx context.Context, runID string) ([]claims.Step, error)
	ActiveQuarantine(ctx context.Context, host, deviceRP string) (claims.Quarantine, bool, error)
}

// Status joins a Placement scan of host with its cleaning runs.
func Status(ctx context.Context, devs []placement.Device, runs Runs, host string, now time.Time) ([]DeviceStatus, error) {
	out := make([]DeviceStatus, 0, len(devs))
	for _, d := range devs {
		st := DeviceStatus{Address: string(d.Address), RP: d.UUID, Name: d.Name, State: string(d.State),
			Reserved: d.Inventory.Reserved, Total: d.Inventory.Total, Quarantined: d.Quarantined}
		if d.Why != "" {
			st.State += " (" + d.Why + ")"
		}
		q, held, err := runs.ActiveQuarantine(ctx, host, d.UUID)
		if err != nil {
			return nil, err
		}
		if held {
			st.Held = q.Reason
		}
		rs, err := runs.ListRuns(ctx, claims.RunFilter{Host: host, Device: d.UUID, Limit: 20})
		if err != nil {
			return nil, fmt.Errorf("cleaning runs of %s: %w", d.Ref, err)
		}
		for _, r := range rs {
			switch {
			case !r.Finished() && st.OpenRun == "":
				since := r.StartedAt
				st.OpenRun, st.OpenSince = r.ID, &since
				if err := currentStep(ctx, runs, r.ID, now, &st); err != nil {
					return nil, err
				}
			case r.Finished() && st.LastRun == "":
				st.LastRun, st.Verdict, st.Ended = r.ID, string(r.State), r.EndedAt
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// currentStep fills the open run's running step, its percent and the ETA
// its pace so far gives (none before the first progress report).
func currentStep(ctx context.Context, runs Runs, runID string, now time.Time, st *DeviceStatus) error {
	steps, err := runs.Steps(ctx, runID)
	if err != nil {
		return fmt.Errorf("steps of run %s: %w", runID, err)
	}
	for i := len(steps) - 1; i >= 0; i-- {
		s := steps[i]
		if s.EndedAt != nil {
			continue
		}
		p := s.Progress
		st.Step, st.Percent = s.Name, &p
		if elapsed := now.Sub(s.StartedAt); p > 0 && p < 100 && elapsed > 0 {
			eta := now.Add(time.Duration(float64(elapsed) * float64(100-p) / float64(p))).Round(time.Second)
			st.ETA = &eta
		}
		return nil
	}
	return nil
}

// FindDevice picks one device of a scan by resource provider UUID or PCI
// address (any accepted spelling).
func FindDevice(devs []placement.Device, target string) (placement.Device, error) {
	addr, addrErr := hardware.ParseAddress(target)
	for _, d := range devs {
		if strings.EqualFold(d.UUID, target) || (addrErr == nil && d.Address == addr) {
			return d, nil
		}
	}
	return placement.Device{}, &OperatorError{fmt.Sprintf("no one-time-use device %q on this host's compute node in Placement (see scourctl placement scan)", target)}
}
