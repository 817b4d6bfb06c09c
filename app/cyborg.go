package app

import (
	"context"
	"time"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/scour-project/scour/cyborg"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/placement"
)

// accelerators implements handlers.Accelerators over cyborg.Client.
type accelerators struct{ c *cyborg.Client }

// newAccelerators is the Cyborg ARQ reader scourd wires when
// placement.cyborg reads ARQs, authenticated as Placement is; nil
// otherwise.
func newAccelerators(cfg placement.Config) handlers.Accelerators {
	if !cfg.Cyborg.ARQs() {
		return nil
	}
	timeout := cfg.RequestTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	return accelerators{cyborg.New(func(ctx context.Context) (*gophercloud.ServiceClient, error) {
		return placement.NewServiceClient(ctx, cfg, cyborg.ServiceType, cfg.Cyborg.Endpoint, nil)
	}, timeout)}
}

func (a accelerators) InstanceARQs(ctx context.Context, instance string) ([]handlers.ARQ, error) {
	list, err := a.c.InstanceARQs(ctx, instance)
	if err != nil {
		return nil, err
	}
	out := make([]handlers.ARQ, 0, len(list))
	for _, q := range list {
		h := handlers.ARQ{UUID: q.UUID, State: q.State, Hostname: q.Hostname, DeviceRPUUID: q.DeviceRPUUID,
			AttachHandleType: q.AttachHandleType}
		if addr, err := q.PCIAddress(); err != nil {
			h.AddressErr = err.Error()
		} else {
			h.Address = addr
		}
		out = append(out, h)
	}
	return out, nil
}
