package app

import (
	"context"
	"log/slog"
	"os"
	"sync"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/images"
	"github.com/scour-project/scour/placement"
	"github.com/scour-project/scour/plugins/builtin"
)

// newImageResolver is the engine's resolver of Glance images: the cache
// is opened now (a bad cache_dir fails the start), Glance is reached on
// first use with placement's credentials.
func newImageResolver(cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) (builtin.ImageResolver, error) {
	cache, err := images.OpenCache(cfg.Images.CacheDir, cfg.Images.CacheMaxBytes)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var sc *gophercloud.ServiceClient
	client := func(ctx context.Context) (*gophercloud.ServiceClient, error) {
		mu.Lock()
		defer mu.Unlock()
		if sc != nil {
			return sc, nil
		}
		c, err := placement.ImageClient(ctx, cfg.Placement, cfg.Images.Glance.Endpoint, os.Getenv)
		if err != nil {
			return nil, err
		}
		sc = c
		return sc, nil
	}
	g := images.NewGlance(client, cache, cfg.Images.Glance, images.NewMetrics(reg), log)
	return images.Steps{Source: g}, nil
}
