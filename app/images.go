package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

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
// found on first use. When a step names a Glance image, a connection to
// Glance that would not protect it (the catalog's endpoint not https, a
// catalog from a plain-http Keystone, certificate verification off by
// OS_INSECURE or clouds.yaml) stops the start unless
// images.glance.allow_insecure_images: config.Validate can see only the
// configured endpoint and placement.insecure.
func newImageResolver(cfg *config.Config, pc *placement.Client, log *slog.Logger, reg prometheus.Registerer) (builtin.ImageResolver, error) {
	cache, err := images.OpenCache(cfg.Images.CacheDir, cfg.Images.CacheMaxBytes)
	if err != nil {
		return nil, err
	}
	client := func(context.Context) (*gophercloud.ServiceClient, error) {
		return pc.ServiceClient("image", cfg.Images.Glance.Endpoint)
	}
	g := images.NewGlance(client, cache, cfg.Images.Glance, images.NewMetrics(reg), log)
	if err := insecureGlance(cfg, g, log); err != nil {
		return nil, err
	}
	return images.Steps{Source: g}, nil
}

// insecureGlance refuses the start when a step names a Glance image and
// Glance's connection, as the login shows it, would not protect it.
// A catalog without Glance is left to the first fetch (it fails
// "unavailable" there, the device reserved).
func insecureGlance(cfg *config.Config, g interface {
	InsecureTransport(context.Context) (string, error)
}, log *slog.Logger) error {
	steps := cfg.GlanceSteps()
	if len(steps) == 0 {
		return nil
	}
	why, err := g.InsecureTransport(context.Background())
	switch {
	case err != nil:
		log.Warn("cannot tell yet how Glance is reached; each fetch checks it", "error", err)
	case why == "":
	case cfg.Images.Glance.AllowInsecureImages:
		log.Warn("Glance images are taken over an insecure connection: their hash check proves nothing against whoever can change it", "why", why, "allowed_by", images.AllowInsecureKey, "steps", steps)
	default:
		return fmt.Errorf("%s name a Glance image, but %s: whoever can change that connection can replace a golden image and the hash scour checks it against together; refusing to start (reach Glance, and Keystone when the catalog names Glance, over https with certificate verification, or set %s: true to accept the risk)",
			strings.Join(steps, ", "), why, images.AllowInsecureKey)
	}
	return nil
}
