package handlerstest

import (
	"context"
	"fmt"

	"github.com/scour-project/scour/handlers"
)

// Placement delegates to W unless a function field replaces the call.
type Placement struct {
	W                    *World
	ScanHostF            func(ctx context.Context) ([]handlers.Device, error)
	InstanceAllocationsF func(ctx context.Context, instance string) (handlers.InstanceAllocation, error)
	ReadDeviceF          func(ctx context.Context, d handlers.Device) (handlers.Device, error)
	BurnF                func(ctx context.Context, d handlers.Device) error
	UnreserveF           func(ctx context.Context, d handlers.Device) error
	QuarantineF          func(ctx context.Context, d handlers.Device, reason string) error
	// Journal, when set, is asked before an un-reserve's PUT, as the gate
	// asks the run's claims.PutJournal.NotePut: its error is returned and
	// nothing is sent (Claims.NotePut refuses as the store does).
	Journal func(rp, runID string) error
}

var _ handlers.Placement = (*Placement)(nil)

func (p *Placement) ScanHost(ctx context.Context) ([]handlers.Device, error) {
	if p.ScanHostF != nil {
		return p.ScanHostF(ctx)
	}
	return p.W.ScanHost(ctx)
}

func (p *Placement) InstanceAllocations(ctx context.Context, instance string) (handlers.InstanceAllocation, error) {
	if p.InstanceAllocationsF != nil {
		return p.InstanceAllocationsF(ctx, instance)
	}
	return p.W.InstanceAllocations(ctx, instance)
}

func (p *Placement) ReadDevice(ctx context.Context, d handlers.Device) (handlers.Device, error) {
	if p.ReadDeviceF != nil {
		return p.ReadDeviceF(ctx, d)
	}
	return p.W.ReadDevice(ctx, d)
}

func (p *Placement) Burn(ctx context.Context, d handlers.Device) error {
	if p.BurnF != nil {
		return p.BurnF(ctx, d)
	}
	return p.W.Burn(ctx, d)
}

func (p *Placement) Refence(ctx context.Context, d handlers.Device) error {
	return p.W.Refence(ctx, d)
}

func (p *Placement) Unreserve(ctx context.Context, d handlers.Device, runID string) error {
	if p.UnreserveF != nil {
		return p.UnreserveF(ctx, d)
	}
	if p.Journal != nil {
		if err := p.Journal(d.RPUUID, runID); err != nil {
			return fmt.Errorf("un-reserve %s: recording the PUT in the claims store before sending it (nothing sent): %w", d.RPName, err)
		}
	}
	return p.W.Unreserve(ctx, d)
}

func (p *Placement) Quarantine(ctx context.Context, d handlers.Device, reason string) error {
	if p.QuarantineF != nil {
		return p.QuarantineF(ctx, d, reason)
	}
	return p.W.Quarantine(ctx, d, reason)
}

// Hardware reports every address present unless PresentF says otherwise.
type Hardware struct {
	PresentF func(ctx context.Context, addr hardwareAddress) (bool, error)
}

var _ handlers.Hardware = (*Hardware)(nil)

func (h *Hardware) Present(ctx context.Context, addr hardwareAddress) (bool, error) {
	if h.PresentF != nil {
		return h.PresentF(ctx, addr)
	}
	return true, nil
}
