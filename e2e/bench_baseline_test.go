package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/scour-project/scour/e2e/harness"
)

// sampleListener does what Nova's sample listener (contrib/clean-on-delete.py)
// does, for the lifecycle benchmark's baseline: on each instance.delete.end
// of one of its hosts it rescans that host's whole tree serially under one
// global lock (3 calls, then 3 per device: inventories, usages, traits),
// cleans each dirty device one at a time with a command (the same plugin
// scourd runs, so both pay one process per cleaning), and un-reserves with
// a PUT of total+reserved+generation at microversion 1.6. No state, no
// retries: a failure is logged and forgotten.
type sampleListener struct {
	p       *harness.Placement
	cleaner string            // plugin path
	seconds map[string]string // host -> SCOUR_ARG_SECONDS
	stamps  map[string]string // host -> SCOUR_ARG_STAMPS
	calls   atomic.Int64
	mu      sync.Mutex // the sample's global lock
	started sync.Map   // host -> time the first cleaning of the round started
	lastPut sync.Map   // host -> time the round's last successful un-reserve returned
	errs    atomic.Int64
	http5xx atomic.Int64 // 5xx answers from Placement
	busy    atomic.Int64 // deletes received and not yet handled
	got     atomic.Int64 // deletes received
}

func (s *sampleListener) run(ctx context.Context, t *testing.T, brokerURL string) {
	conn, err := amqp.Dial(brokerURL)
	if err != nil {
		t.Fatalf("baseline: dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.DeclareNovaExchange(ch, harness.NovaExchange); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err == nil {
		err = ch.QueueBind(q.Name, "versioned_notifications.info", harness.NovaExchange, false, nil)
	}
	if err != nil {
		t.Fatalf("baseline: queue: %v", err)
	}
	msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-msgs:
				if !ok {
					return
				}
				if host := deleteHost(m.Body); s.seconds[host] != "" {
					s.busy.Add(1)
					s.got.Add(1)
					go s.onDelete(ctx, host)
				}
			}
		}
	}()
}

// deleteHost returns the host of an instance.delete.end, "" otherwise.
func deleteHost(body []byte) string {
	var env struct {
		Msg string `json:"oslo.message"`
	}
	var n struct {
		EventType string `json:"event_type"`
		Payload   struct {
			Data struct {
				Host string `json:"host"`
			} `json:"nova_object.data"`
		} `json:"payload"`
	}
	if json.Unmarshal(body, &env) != nil || json.Unmarshal([]byte(env.Msg), &n) != nil || n.EventType != "instance.delete.end" {
		return ""
	}
	return n.Payload.Data.Host
}

func (s *sampleListener) onDelete(ctx context.Context, host string) {
	defer s.busy.Add(-1)
	s.mu.Lock()
	defer s.mu.Unlock()
	var nodes struct {
		RPs []struct {
			UUID string `json:"uuid"`
		} `json:"resource_providers"`
	}
	if s.get(ctx, "/resource_providers?name="+url.QueryEscape(host), &nodes) != nil || len(nodes.RPs) != 1 {
		return
	}
	var tree, otu struct {
		RPs []struct {
			UUID string `json:"uuid"`
		} `json:"resource_providers"`
	}
	s.get(ctx, "/resource_providers?in_tree="+nodes.RPs[0].UUID, &tree)
	if s.get(ctx, "/resource_providers?in_tree="+nodes.RPs[0].UUID+"&required="+harness.TraitOneTimeUse, &otu) != nil {
		return
	}
	for _, rp := range otu.RPs {
		if rp.UUID == nodes.RPs[0].UUID {
			continue
		}
		var inv struct {
			Gen  int                       `json:"resource_provider_generation"`
			Invs map[string]map[string]int `json:"inventories"`
		}
		var use struct {
			Usages map[string]int `json:"usages"`
		}
		s.get(ctx, "/resource_providers/"+rp.UUID+"/inventories", &inv)
		s.get(ctx, "/resource_providers/"+rp.UUID+"/usages", &use)
		s.get(ctx, "/resource_providers/"+rp.UUID+"/traits", nil)
		for rc, i := range inv.Invs {
			if i["reserved"] >= i["total"] && use.Usages[rc] == 0 {
				s.clean(ctx, host, rp.UUID, rc, inv.Gen, i["total"])
			}
		}
	}
}

func (s *sampleListener) clean(ctx context.Context, host, rp, rc string, gen, total int) {
	s.started.LoadOrStore(host, time.Now())
	cmd := exec.CommandContext(ctx, s.cleaner)
	cmd.Env = append(os.Environ(), "SCOUR_COMMAND=CLEAN", "SCOUR_ARG_SECONDS="+s.seconds[host], "SCOUR_ARG_STAMPS="+s.stamps[host])
	cmd.Stdin = bytes.NewReader(nil)
	if err := cmd.Run(); err != nil {
		s.errs.Add(1)
		return
	}
	body := map[string]any{"resource_provider_generation": gen, "total": total, "reserved": 0}
	if s.do(ctx, http.MethodPut, "/resource_providers/"+rp+"/inventories/"+rc, "1.6", body, nil) != nil {
		s.errs.Add(1)
		return
	}
	s.lastPut.Store(host, time.Now())
}

func (s *sampleListener) get(ctx context.Context, path string, out any) error {
	return s.do(ctx, http.MethodGet, path, "1.18", nil, out)
}

func (s *sampleListener) do(ctx context.Context, method, path, mv string, in, out any) error {
	s.calls.Add(1)
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.p.BackendURL()+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("X-Auth-Token", s.p.Token())
	req.Header.Set("OpenStack-API-Version", "placement "+mv)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.p.HTTPClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 500 {
		s.http5xx.Add(1)
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}
