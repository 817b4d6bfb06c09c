package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrNotRunning: no scourd answers on the socket.
var ErrNotRunning = errors.New("scourd's admin socket does not answer")

// Client talks to scourd over its admin socket.
type Client struct {
	socket string
	hc     *http.Client
}

func NewClient(socket string) *Client {
	return &Client{socket: socket, hc: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}}
}

// Status is scourd's view of the host's devices; PlacementError is set
// when Placement did not answer scourd (the devices are then the store's).
func (c *Client) Status(ctx context.Context) (Report, error) {
	var rep Report
	err := c.call(ctx, http.MethodGet, "/v1/status", func(resp *http.Response) error {
		rep.PlacementError = resp.Header.Get(placementErrorHeader)
		return json.NewDecoder(resp.Body).Decode(&rep.Devices)
	})
	return rep, err
}

// Rescan asks scourd to scan Placement now.
func (c *Client) Rescan(ctx context.Context, reason string) error {
	return c.call(ctx, http.MethodPost, "/v1/rescan?reason="+url.QueryEscape(reason), nil)
}

// Clean asks scourd to clean device now; it returns scourd's account.
func (c *Client) Clean(ctx context.Context, device, by string) (string, error) {
	return c.text(ctx, "/v1/clean?"+url.Values{"device": {device}, "by": {by}}.Encode())
}

// Retire asks scourd to keep device reserved with reason; noWipe asks it
// not to wipe a device that still holds its last tenant's data.
func (c *Client) Retire(ctx context.Context, device, by, reason string, noWipe bool) (string, error) {
	q := url.Values{"device": {device}, "by": {by}, "reason": {reason}}
	if noWipe {
		q.Set("no_wipe", "1")
	}
	return c.text(ctx, "/v1/retire?"+q.Encode())
}

func (c *Client) text(ctx context.Context, path string) (string, error) {
	var msg string
	err := c.call(ctx, http.MethodPost, path, func(resp *http.Response) error {
		raw, err := io.ReadAll(resp.Body)
		msg = string(raw)
		return err
	})
	return msg, err
}

func (c *Client) call(ctx context.Context, method, path string, read func(*http.Response) error) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://scourd"+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w (%s): is scourd running on this host?", ErrNotRunning, c.socket)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: permission denied: run as root or as a member of scourd's admin.group", c.socket)
	case err != nil:
		return fmt.Errorf("scourd's admin socket %s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("scourd refused (%s): %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	if read == nil {
		return nil
	}
	return read(resp)
}
