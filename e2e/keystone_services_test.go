package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// The same Keystone in front of Placement, Glance and Cyborg (issue 30,
// item 5): scourd authenticates once (clouds.yaml, the catalog's internal
// endpoints in the test's region) and reaches all three on that session.

// glanceBehindKeystone is Glance behind c's Keystone (secure RBAC), its
// image endpoints in c's region, and the operator's project that owns the
// golden images (images.glance.owners).
func (c *keystoneCloud) glanceBehindKeystone(t *testing.T) (g *harness.Glance, operator string) {
	t.Helper()
	return c.glanceIn(t, harness.StartGlance(t, harness.BehindKeystone(c.K, "")))
}

// legacyGlanceBehindKeystone is glanceBehindKeystone with Glance's secure
// RBAC off (Glance 25's default policy), its own shared container.
func (c *keystoneCloud) legacyGlanceBehindKeystone(t *testing.T) (g *harness.Glance, operator string) {
	t.Helper()
	return c.glanceIn(t, harness.StartGlance(t, harness.BehindKeystone(c.K, ""), harness.SecureRBAC(false)))
}

func (c *keystoneCloud) glanceIn(t *testing.T, g *harness.Glance) (*harness.Glance, string) {
	t.Helper()
	g.RegisterInCatalog(t, c.Region, "internal", "public")
	return g, c.K.Project(t, harness.UniqueName("golden"), harness.DefaultDomainID)
}

// uploadSharedGolden uploads model's golden bitstream as the operator's
// project's image and shares it with scour's project (docs/images.md,
// Keystone), accepted.
func (c *keystoneCloud) uploadSharedGolden(t *testing.T, g *harness.Glance, operator, model, bitstreamID string) string {
	t.Helper()
	id := g.Upload(t, harness.GlanceImage{Name: "n3000-golden-" + model, Tags: []string{"scour-golden"}, Owner: operator,
		Properties: map[string]string{"scour_model": model, "bitstream_id": bitstreamID}, Data: goldenBitstream(bitstreamID)})
	g.Share(t, id, c.Service)
	return id
}

// withCatalogGlance is withGlanceFPGA with Glance found in the catalog
// (no images.glance.endpoint) and operator the trusted owner.
func withCatalogGlance(g *harness.Glance, model, operator string) HostOption {
	return func(cfg map[string]any) {
		withGlanceFPGA(g, model)(cfg)
		gl := cfg["images"].(map[string]any)["glance"].(map[string]any)
		delete(gl, "endpoint")
		gl["owners"] = []string{operator}
	}
}

// An FPGA's golden image from Glance with Keystone in front of Placement
// and Glance: scourd, as a user with the documented Placement role scour
// and Glance's member role on its project, finds Glance in the catalog,
// reads the operator's image shared with its project, programs it and
// returns the card, on one Keystone login for both services.
func TestKeystoneFPGAGoldenImageFromGlance(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := newKeystoneCloud(t, false, 0)
	g, operator := c.glanceBehindKeystone(t)
	name, _ := c.user(t, "scour", "member")
	model := harness.UniqueName("n3000")
	golden := "0xgolden-" + model
	imgID := c.uploadSharedGolden(t, g, operator, model, golden)
	h := c.AddHost(t, []SimDevice{{Address: fpgaAddr, Kind: "fpga"}}, WithReconcileInterval(time.Hour),
		withCloud(c.cloudsYAML(t, name), name), withCatalogGlance(g, model, operator))
	s := hostSim(t, h)

	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, fpgaAddr)
	waitClaim(t, h, inst)
	loadTenantBitstream(t, s, "0xtenant-"+inst[:8])
	c.Delete(t, h, inst, harness.Versioned)
	c.WaitAvailable(t, h, fpgaAddr, 2*time.Minute)
	if got := regions(t, s); got[0] != golden || got[1] != golden {
		t.Fatalf("card returned holding %v, want the golden %s in every region", got, golden)
	}
	rec := parseRecord(t, h.Records(t, fpgaAddr)[0])
	if rec.Result.State != "returned" || len(rec.Images) == 0 || rec.Images[0].ID != imgID || rec.Images[0].Source != "glance" {
		t.Fatalf("record: %s, images %+v; want returned with Glance image %s", rec.Result.State, rec.Images, imgID)
	}
	if total, _ := g.Requests(); total == 0 {
		t.Fatal("no request reached the catalog's Glance endpoint (the test's proxy)")
	}
	// One login for Placement and Glance (a second only once the first
	// token expired).
	if n := len(c.K.Issued()); n != 1 && time.Since(start) < harness.DefaultTokenExpiration-10*time.Second {
		t.Errorf("scourd logged in to Keystone %d times, want once: Glance is reached on Placement's session", n)
	}
}

// The golden-image lifecycle of TestKeystoneFPGAGoldenImageFromGlance
// against Glance with secure RBAC off (Glance 25's default, which many
// clouds still run: the deprecated rules, rule:default, OR-ed into every
// image rule), once per role scour's user holds on its project besides
// scour (Placement's): member, reader only, and none. Each run programs
// the operator's golden image, fetched from the catalog's Glance through
// Keystone, and returns the card on its first run; the record names the
// Glance image. Were scour to refuse (or Glance to refuse scour) under
// that policy, the card would stay reserved (WaitAvailable fails) or the
// record would show a failed run first.
func TestKeystoneLegacyGlanceGoldenImage(t *testing.T) {
	t.Parallel()
	for _, role := range []string{"member", "reader", ""} {
		sub := "scour+" + role
		if role == "" {
			sub = "scour-only"
		}
		t.Run(sub, func(t *testing.T) {
			t.Parallel()
			c := newKeystoneCloud(t, false, 0)
			g, operator := c.legacyGlanceBehindKeystone(t)
			roles := []string{"scour"}
			if role != "" {
				roles = append(roles, role)
			}
			name, _ := c.user(t, roles...)
			model := harness.UniqueName("n3000")
			golden := "0xgolden-" + model
			imgID := c.uploadSharedGolden(t, g, operator, model, golden)
			h := c.AddHost(t, []SimDevice{{Address: fpgaAddr, Kind: "fpga"}}, WithReconcileInterval(2*time.Second),
				withCloud(c.cloudsYAML(t, name), name), withCatalogGlance(g, model, operator))
			s := hostSim(t, h)

			inst, _ := tenantLoadsBitstream(t, c.Cloud, h, s)
			c.Delete(t, h, inst, harness.Versioned)
			c.WaitAvailable(t, h, fpgaAddr, 2*time.Minute)
			if got := regions(t, s); got[0] != golden || got[1] != golden {
				t.Fatalf("card returned holding %v, want the golden %s in every region", got, golden)
			}
			recs := h.Records(t, fpgaAddr)
			for _, raw := range recs {
				rec := parseRecord(t, raw)
				t.Logf("record %s: %s: %q", rec.RunID, rec.Result.State, rec.Result.Summary)
			}
			rec := parseRecord(t, recs[0])
			if len(recs) != 1 || rec.Result.State != "returned" || len(rec.Images) == 0 || rec.Images[0].ID != imgID || rec.Images[0].Source != "glance" {
				t.Fatalf("%d records, newest %s, images %+v; want one run, returned with Glance image %s", len(recs), rec.Result.State, rec.Images, imgID)
			}
			if total, _ := g.Requests(); total == 0 {
				t.Fatal("no request reached the catalog's Glance endpoint (the test's proxy)")
			}
		})
	}
}

// scour's user with Glance's reader role only (no member): scourd finds
// the golden image and Glance's policy refuses its download. The run
// says which permission is missing, nothing is programmed, the card
// stays reserved (never returned without its golden image) and is not
// quarantined. With member granted (and scourd's token revoked, so its
// next login carries it) the next run returns the card.
func TestKeystoneGlanceReaderRefusedDownload(t *testing.T) {
	t.Parallel()
	c := newKeystoneCloud(t, false, 0)
	g, operator := c.glanceBehindKeystone(t)
	name, id := c.user(t, "scour", "reader")
	model := harness.UniqueName("n3000")
	golden := "0xgolden-" + model
	c.uploadSharedGolden(t, g, operator, model, golden)
	h := c.AddHost(t, []SimDevice{{Address: fpgaAddr, Kind: "fpga"}}, WithReconcileInterval(2*time.Second),
		withCloud(c.cloudsYAML(t, name), name), withCatalogGlance(g, model, operator))
	card, s := h.Device(fpgaAddr), hostSim(t, h)

	inst, tenant := tenantLoadsBitstream(t, c.Cloud, h, s)
	c.Delete(t, h, inst, harness.Versioned)

	var recs []map[string]any
	Eventually(t, 2*time.Minute, "two refused runs of the card", func() (bool, string) {
		recs = h.Records(t, fpgaAddr)
		return len(recs) >= 2, "scourd log tail:\n" + tail(h.Logs(), 20)
	})
	for _, raw := range recs {
		rec := parseRecord(t, raw)
		if rec.Result.State != "failed" || !containsAll(rec.Result.Summary, "download_image permission", "member role", "stays reserved") {
			t.Fatalf("record of run %s: %s: %q; want failed, naming the download_image permission and the member role", rec.RunID, rec.Result.State, rec.Result.Summary)
		}
		if len(rec.Method.Steps) == 0 || rec.Method.Steps[0].Details["image_refused"] != "forbidden" {
			t.Fatalf("record of run %s: steps %+v; want program refused as forbidden", rec.RunID, rec.Method.Steps)
		}
	}
	if r := c.Reserved(t, card); r != 1 {
		t.Fatalf("reserved=%d while Glance refuses the golden image, want 1", r)
	}
	if got := regions(t, s); got[0] != tenant || got[1] != tenant {
		t.Fatalf("regions %v, want the tenant's %s untouched: something was programmed", got, tenant)
	}
	if c.Quarantined(t, card) {
		t.Fatal("the card was quarantined for scour's missing Glance role")
	}
	waitLog(t, h, 10*time.Second, `msg="image refused: nothing is programmed"`, "forbidden")

	// The operator grants member; scourd's next login carries it.
	c.K.Grant(t, id, c.Service, "member")
	issued := c.K.Issued()
	c.K.Revoke(t, issued[len(issued)-1])
	c.WaitAvailable(t, h, fpgaAddr, 2*time.Minute)
	if got := regions(t, s); got[0] != golden || got[1] != golden {
		t.Fatalf("card returned holding %v, want %s", got, golden)
	}
	if rec := parseRecord(t, h.Records(t, fpgaAddr)[0]); rec.Result.State != "returned" {
		t.Fatalf("newest record %s, want returned", rec.Result.State)
	}
}

// The Cyborg lifecycle with Keystone in front of Placement and the
// Cyborg stand-in (which validates every token with that Keystone): scourd
// finds Cyborg in the catalog (no placement.cyborg.endpoint), records the
// ARQ at the bind with a token Keystone vouches for as scour's user, and
// cleans and returns the card after the release.
func TestKeystoneCyborgAcceleratorLifecycle(t *testing.T) {
	t.Parallel()
	c := newKeystoneCloud(t, false, 0)
	cy := harness.StartCyborgBehindKeystone(t, c.K, c.Region, "internal", "public")
	name, userID := c.user(t, "scour")
	const fpga = "0000:3b:00.0"
	h := c.addCyborgHost(t, cy, []cyborgCard{{fpga, "FPGA", 4}}, withCloud(c.cloudsYAML(t, name), name),
		func(cfg map[string]any) {
			delete(cfg["placement"].(map[string]any)["cyborg"].(map[string]any), "endpoint")
		})
	card := h.Device(fpga)

	inst := harness.NewUUID()
	c.bindAccelerator(t, cy, h, inst, fpga, "", false)
	c.waitReserved(t, h, card, 4, "the FPGA fenced whole at the bind")
	waitLog(t, h, 30*time.Second, `msg="Cyborg ARQ recorded"`, "instance="+inst, "attach_handle="+fpga)
	reqs := cy.Requests()
	if len(reqs) == 0 {
		t.Fatal("the Cyborg stand-in got no request")
	}
	for _, r := range reqs {
		if r.Auth.Err != "" || r.Auth.UserID != userID || r.Auth.ProjectID != c.Service || !slices.Contains(r.Auth.Roles, "scour") {
			t.Fatalf("Cyborg request %s %s?%s: Keystone said %+v; want scour's user %s on the service project %s with role scour", r.Method, r.Path, r.Query, r.Auth, userID, c.Service)
		}
	}
	if st := tryAllocate(t, c.Cloud, h, card); st != http.StatusConflict {
		t.Fatalf("a unit of the fenced FPGA was allocatable (status %d)", st)
	}
	c.releaseAccelerator(t, cy, h, inst, "instance.delete.end")
	c.WaitAvailable(t, h, fpga, 90*time.Second)
	aReturnedOnce(t, h, fpga)
	if strings.Contains(h.Logs(), "cyborg: connect to the accelerator API") {
		t.Error("scourd failed to reach Cyborg through the catalog at some point")
	}
}
