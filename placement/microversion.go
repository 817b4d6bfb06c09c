package placement

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

const (
	// MinMicroversion: reserved == total is accepted from 1.26.
	MinMicroversion = "1.26"
	// MaxMicroversion is the newest scour knows (Placement 8.0.0 serves it).
	MaxMicroversion = "1.39"
)

// negotiate reads the version document at the endpoint root once and picks
// the highest microversion both sides know.
func (c *Client) negotiate(ctx context.Context) (string, error) {
	var doc struct {
		Versions []struct {
			ID         string `json:"id"`
			MinVersion string `json:"min_version"`
			MaxVersion string `json:"max_version"`
		} `json:"versions"`
	}
	sc := *c.sc
	sc.Microversion = ""
	saved := c.sc
	c.sc = &sc
	err := c.retry(ctx, func(ctx context.Context) error {
		return c.do(ctx, http.MethodGet, "", nil, &doc, http.StatusOK)
	})
	c.sc = saved
	if err != nil {
		return "", fmt.Errorf("placement: reading the version document at %s: %w", c.sc.Endpoint, err)
	}
	for _, v := range doc.Versions {
		if !strings.HasPrefix(v.ID, "v1") {
			continue
		}
		return pickMicroversion(v.MinVersion, v.MaxVersion)
	}
	return "", fmt.Errorf("%w: %s offers no v1 API (version document %+v)", ErrMicroversion, c.sc.Endpoint, doc.Versions)
}

func pickMicroversion(serverMin, serverMax string) (string, error) {
	smax, err1 := parseMV(serverMax)
	smin, err2 := parseMV(serverMin)
	if err := errors.Join(err1, err2); err != nil {
		return "", fmt.Errorf("%w: unreadable version document: %w", ErrMicroversion, err)
	}
	lo, _ := parseMV(MinMicroversion)
	hi, _ := parseMV(MaxMicroversion)
	if smax < lo {
		return "", fmt.Errorf("%w: Placement serves up to %s but scour needs at least %s "+
			"(to set reserved == total); upgrade Placement (Train or newer) before starting scour",
			ErrMicroversion, serverMax, MinMicroversion)
	}
	pick := min(smax, hi)
	if pick < smin {
		return "", fmt.Errorf("%w: Placement's minimum %s is above scour's maximum %s; upgrade scour",
			ErrMicroversion, serverMin, MaxMicroversion)
	}
	return fmt.Sprintf("1.%d", pick), nil
}

// parseMV reads "1.N" as N (the major version is always 1 here).
func parseMV(s string) (int, error) {
	maj, minor, ok := strings.Cut(s, ".")
	if !ok || maj != "1" {
		return 0, fmt.Errorf("microversion %q is not 1.N", s)
	}
	return strconv.Atoi(minor)
}
