package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
)

// call sends one request to the Placement backend (never through the fault
// proxy) at microversion mv and decodes a JSON answer into out. A status
// outside ok fails the test with the body Placement sent.
func (p *Placement) call(t testing.TB, method, path, mv string, in, out any, ok ...int) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatalf("e2e harness: encoding %s %s: %v", method, path, err)
		}
		body = bytes.NewReader(b) // sized: uwsgi rejects chunked bodies
	}
	req, err := http.NewRequestWithContext(t.Context(), method, p.backend+path, body)
	if err != nil {
		t.Fatalf("e2e harness: %s %s: %v", method, path, err)
	}
	req.Header.Set("X-Auth-Token", p.Token())
	req.Header.Set("OpenStack-API-Version", "placement "+mv)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatalf("e2e harness: %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if len(ok) == 0 {
		ok = []int{http.StatusOK}
	}
	if !slices.Contains(ok, resp.StatusCode) {
		logs := ""
		if p.keystone != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusServiceUnavailable) {
			logs = "\n" + p.svc.logTail(context.WithoutCancel(t.Context())) // why keystonemiddleware refused
		}
		t.Fatalf("e2e harness: %s %s (placement %s) answered %s: %s%s", method, path, mv, resp.Status, raw, logs)
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("e2e harness: decoding %s %s: %v: %s", method, path, err, raw)
		}
	}
	return resp.StatusCode
}
