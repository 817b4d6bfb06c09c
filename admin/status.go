package admin

import (
	"cmp"
	"context"
	"fmt"
	"slices"
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
	// PlacementUnknown: listed from the store while Placement did not
	// answer (StoreStatus); State, Reserved and Total are unknown.
	PlacementUnknown bool `json:"placement_unknown,omitempty"`
}

// StatePlacementUnknown is the state of a device listed from the claims
// store alone (StoreStatus): Placement did not answer.
const StatePlacementUnknown = "unknown (Placement did not answer)"

// Report is scourd's answer to status.
type Report struct {
	Devices []DeviceStatus
	// PlacementError, when set, says why Placement's view is missing:
	// Devices are then StoreStatus's, the store's open runs and
	// quarantines only.
	PlacementError string
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
		if err := addRuns(ctx, runs, host, now, &st); err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// StoreRuns is what StoreStatus reads: Runs plus the host's open runs
// and quarantines.
type StoreRuns interface {
	Runs
	UnfinishedRuns(ctx context.Context, host string) ([]claims.Run, error)
	OpenQuarantines(ctx context.Context, host string) ([]claims.Quarantine, error)
}

// StoreStatus is Status while Placement does not answer: the devices of
// host that the claims store has an open run or an open quarantine
// (verdict or retirement) for, by address, each with what Status shows
// from the store. Their state, reserved and total are unknown
// (PlacementUnknown); devices with neither are not listed.
func StoreStatus(ctx context.Context, runs StoreRuns, host string, now time.Time) ([]DeviceStatus, error) {
	open, err := runs.UnfinishedRuns(ctx, host)
	if err != nil {
		return nil, err
	}
	held, err := runs.OpenQuarantines(ctx, host)
	if err != nil {
		return nil, err
	}
	addr := map[string]string{} // device RP -> PCI address
	for _, r := range open {
		addr[r.DeviceRP] = r.Address
	}
	for _, q := range held {
		if addr[q.DeviceRP] == "" {
			addr[q.DeviceRP] = q.Address
		}
	}
	out := make([]DeviceStatus, 0, len(addr))
	for rp, a := range addr {
		st := DeviceStatus{Address: a, RP: rp, State: StatePlacementUnknown, PlacementUnknown: true}
		if err := addRuns(ctx, runs, host, now, &st); err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b DeviceStatus) int { return cmp.Or(cmp.Compare(a.Address, b.Address), cmp.Compare(a.RP, b.RP)) })
	return out, nil
}

// HostReport is the status report of host: Status over a fresh Placement
// scan, or, while the scan fails, StoreStatus with the scan's error: the
// operator needs the quarantines and open runs most when Placement is
// down, and the store has them.
func HostReport(ctx context.Context, scan func(context.Context) ([]placement.Device, error), runs StoreRuns, host string, now time.Time) (Report, error) {
	devs, err := scan(ctx)
	if err != nil {
		perr := fmt.Errorf("scanning this host in Placement: %w", err)
		st, err := StoreStatus(ctx, runs, host, now)
		if err != nil {
			return Report{}, fmt.Errorf("%w; reading the claims store: %w", perr, err)
		}
		return Report{Devices: st, PlacementError: perr.Error()}, nil
	}
	st, err := Status(ctx, devs, runs, host, now)
	return Report{Devices: st}, err
}

// addRuns fills st (its RP set) from the store: its open quarantine, its
// open run with the current step, its last finished run.
func addRuns(ctx context.Context, runs Runs, host string, now time.Time, st *DeviceStatus) error {
	q, held, err := runs.ActiveQuarantine(ctx, host, st.RP)
	if err != nil {
		return err
	}
	if held {
		st.Held = q.Reason
	}
	rs, err := runs.ListRuns(ctx, claims.RunFilter{Host: host, Device: st.RP, Limit: 20})
	if err != nil {
		return fmt.Errorf("cleaning runs of device %s (%s): %w", st.Address, st.RP, err)
	}
	for _, r := range rs {
		switch {
		case !r.Finished() && st.OpenRun == "":
			since := r.StartedAt
			st.OpenRun, st.OpenSince = r.ID, &since
			if err := currentStep(ctx, runs, r.ID, now, st); err != nil {
				return err
			}
		case r.Finished() && st.LastRun == "":
			st.LastRun, st.Verdict, st.Ended = r.ID, string(r.State), r.EndedAt
		}
	}
	return nil
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
