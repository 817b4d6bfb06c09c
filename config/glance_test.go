package config

import (
	"strings"
	"testing"
)

// A step naming a Glance image with Glance reached over plain http, or
// with certificate verification off (placement.insecure), is a
// configuration error (scourd does not start, --check-config and
// scourctl config fail) unless images.glance.allow_insecure_images says
// the operator accepts that whoever can change the connection can
// replace the golden image and its hash together. (Found in review: such
// endpoints were accepted silently.) Without a Glance step, or over
// https, nothing is said.
func TestGlanceOverAnInsecureConnectionIsAConfigError(t *testing.T) {
	t.Parallel()
	const owners = "SCOUR_IMAGES_GLANCE_OWNERS=ops1"
	for _, tc := range []struct {
		name   string
		env    []string
		glance bool   // point deploy/scour.yaml's fpga-program at Glance
		want   string // "" = valid
	}{
		{"http endpoint", []string{"SCOUR_IMAGES_GLANCE_ENDPOINT=http://glance.example:9292"}, true, "images.glance.endpoint http://glance.example:9292 is not https"},
		{"placement.insecure", []string{"SCOUR_IMAGES_GLANCE_ENDPOINT=https://glance.example:9292", "SCOUR_PLACEMENT_INSECURE=true"}, true, "placement.insecure: true"},
		{"https endpoint", []string{"SCOUR_IMAGES_GLANCE_ENDPOINT=https://glance.example:9292"}, true, ""},
		{"catalog endpoint", nil, true, ""},
		{"http endpoint, allowed", []string{"SCOUR_IMAGES_GLANCE_ENDPOINT=http://glance.example:9292", "SCOUR_IMAGES_GLANCE_ALLOW_INSECURE_IMAGES=true"}, true, ""},
		{"http endpoint, no Glance step", []string{"SCOUR_IMAGES_GLANCE_ENDPOINT=http://glance.example:9292"}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Load("../deploy/scour.yaml", true, append([]string{owners}, tc.env...))
			if err != nil {
				t.Fatalf("deploy/scour.yaml: %v", err)
			}
			if tc.glance {
				for _, pr := range c.Pipelines.Profiles {
					for _, s := range pr.Pipeline.Steps {
						if s.Type == "fpga-program" {
							s.Args["image"] = map[string]any{"glance_query": map[string]any{"tags": []any{"golden"}}}
						}
					}
				}
			}
			err = c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("%v, want valid", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "images.glance.allow_insecure_images") || !strings.Contains(err.Error(), "step program") {
				t.Fatalf("%v, want an error saying %q, naming the step and images.glance.allow_insecure_images", err, tc.want)
			}
		})
	}
}
