package app

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/scour-project/scour/config"
)

// transportSays is a Glance source whose connection, as the login shows
// it, is described by why.
type transportSays string

func (w transportSays) InsecureTransport(context.Context) (string, error) { return string(w), nil }

// What only the login shows (the catalog's endpoint, Keystone's scheme,
// OS_INSECURE, clouds.yaml's verify) stops scourd's start when a step
// names a Glance image, unless images.glance.allow_insecure_images;
// without a Glance step, or over a protected connection, it starts.
func TestInsecureGlanceStopsTheStart(t *testing.T) {
	t.Parallel()
	load := func(t *testing.T, glance bool, env ...string) *config.Config {
		c, err := config.Load("../deploy/scour.yaml", true, append([]string{"SCOUR_IMAGES_GLANCE_OWNERS=ops1"}, env...))
		if err != nil {
			t.Fatal(err)
		}
		for _, pr := range c.Pipelines.Profiles {
			for _, s := range pr.Pipeline.Steps {
				if glance && s.Type == "fpga-program" {
					s.Args["image"] = map[string]any{"glance_id": "i1"}
				}
			}
		}
		return c
	}
	log := slog.New(slog.DiscardHandler)
	const why = "Glance's endpoint http://glance:9292/ is not https"
	err := insecureGlance(load(t, true), transportSays(why), log)
	if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "images.glance.allow_insecure_images") {
		t.Fatalf("insecure Glance with a Glance step: %v, want a refusal to start", err)
	}
	for name, c := range map[string]*config.Config{
		"allowed":          load(t, true, "SCOUR_IMAGES_GLANCE_ALLOW_INSECURE_IMAGES=true"),
		"no Glance step":   load(t, false),
		"protected, https": nil,
	} {
		w := transportSays(why)
		if c == nil {
			c, w = load(t, true), ""
		}
		if err := insecureGlance(c, w, log); err != nil {
			t.Errorf("%s: %v, want a start", name, err)
		}
	}
}
