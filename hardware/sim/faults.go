package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/scour-project/scour/hardware"
)

// Fault kinds.
const (
	FaultFail = "fail" // the operation returns an error
	FaultHang = "hang" // the operation blocks until its context ends
	FaultSlow = "slow" // the operation takes ten steps of SimConfig.Step, reporting progress
)

// SetFault injects kind ("fail", "hang", "slow"; "" clears) into op on addr.
func (s *Simulator) SetFault(addr hardware.Address, op, kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults[addr] == nil {
		s.faults[addr] = map[string]string{}
	}
	if kind == "" {
		delete(s.faults[addr], op)
		return
	}
	s.faults[addr][op] = kind
}

// FaultFile is the file that injects kind into op on addr in a running
// simulator (one per daemon process): create it to inject, remove it to clear.
func FaultFile(stateDir string, addr hardware.Address, kind, op string) string {
	return filepath.Join(stateDir, string(addr), kind+"-"+op)
}

// fault returns the fault for op on d: a fault file wins over SetFault,
// which wins over the config.
func (s *Simulator) fault(d *simDev, op string) (kind, source string) {
	for _, k := range hardware.FaultKinds {
		if _, err := os.Stat(FaultFile(s.cfg.StateDir, d.addr, k, op)); err == nil {
			return k, "file " + k + "-" + op
		}
	}
	s.mu.Lock()
	k := s.faults[d.addr][op]
	s.mu.Unlock()
	if k != "" {
		return k, "SetFault"
	}
	if k := d.cfg.Faults[op]; k != "" {
		return k, "config"
	}
	return "", ""
}

// enter applies an injected fault at the start of op: fail and hang end
// the operation; slow is reported back for the work loop.
func (s *Simulator) enter(ctx context.Context, d *simDev, op string) (slow bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	kind, source := s.fault(d, op)
	switch kind {
	case FaultFail:
		s.log.Info("simulated fault", "device", d.addr, "op", op, "fault", kind, "source", source)
		return false, fmt.Errorf("simulated %s failure on %s (injected by %s)", op, d.addr, source)
	case FaultHang:
		s.log.Info("simulated fault", "device", d.addr, "op", op, "fault", kind, "source", source)
		<-ctx.Done()
		return false, fmt.Errorf("simulated %s on %s hung until its deadline: %w", op, d.addr, ctx.Err())
	}
	return kind == FaultSlow, nil
}

// pause waits one progress step of a slow operation.
func (s *Simulator) pause(ctx context.Context, slow bool) error {
	if !slow {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.after(s.cfg.Step):
		return nil
	}
}
