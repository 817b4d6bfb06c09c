package app

import (
	"context"
	"log/slog"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/images"
	"github.com/scour-project/scour/placement"
	"github.com/scour-project/scour/plugins/builtin"
)

// newImageResolver is the engine's resolver of Glance images: the cache
// is opened now (a bad cache_dir fails the start); Glance is reached on
// Placement's Keystone session (pc: the same token, re-authenticated once
// for both), at images.glance.endpoint or the catalog's image endpoint,
// found on first use.
func newImageResolver(cfg *config.Config, pc *placement.Client, log *slog.Logger, reg prometheus.Registerer) (builtin.ImageResolver, error) {
	cache, err := images.OpenCache(cfg.Images.CacheDir, cfg.Images.CacheMaxBytes)
	if err != nil {
		return nil, err
	}
	client := func(context.Context) (*gophercloud.ServiceClient, error) {
		return pc.ServiceClient("image", cfg.Images.Glance.Endpoint)
	}
	g := images.NewGlance(client, cache, cfg.Images.Glance, images.NewMetrics(reg), log)
	return images.Steps{Source: g}, nil
}
