package app

import (
	"context"
	"time"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/scour-project/scour/cyborg"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/placement"
)

// newAccelerators is the Cyborg ARQ reader scourd wires when
// placement.cyborg reads ARQs, on Placement's Keystone session (the same
// token; Cyborg at placement.cyborg.endpoint or the catalog's accelerator
// endpoint); nil otherwise.
func newAccelerators(pc *placement.Client) handlers.Accelerators {
	cfg := pc.Config()
	if !cfg.Cyborg.ARQs() {
		return nil
	}
	timeout := cfg.RequestTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	return handlers.CyborgARQs{Cyborg: cyborg.New(func(context.Context) (*gophercloud.ServiceClient, error) {
		return pc.ServiceClient(cyborg.ServiceType, cfg.Cyborg.Endpoint)
	}, timeout)}
}
