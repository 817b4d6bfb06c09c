package handlers_test

import (
	"context"
	"errors"
	"testing"

	"github.com/scour-project/scour/cyborg"
	"github.com/scour-project/scour/handlers"
)

type cyborgLister struct {
	arqs []cyborg.ARQ
	err  error
}

func (l cyborgLister) InstanceARQs(_ context.Context, instance string) ([]cyborg.ARQ, error) {
	if instance != "inst-a" {
		return nil, errors.New("asked about " + instance)
	}
	return l.arqs, l.err
}

// Each ARQ Cyborg lists reaches the handlers with the PCI function its
// attach handle names, or with why it names none (never a guessed
// address); Cyborg's error is the handlers' "ask again later".
func TestCyborgARQsCarryTheAttachHandleAddress(t *testing.T) {
	t.Parallel()
	pci := cyborg.ARQ{UUID: "arq-1", State: "Bound", Hostname: "cmp1", DeviceRPUUID: "rp-1", AttachHandleType: "PCI",
		AttachHandleInfo: map[string]string{"domain": "0000", "bus": "81", "device": "00", "function": "1"}}
	mdev := cyborg.ARQ{UUID: "arq-2", State: "Bound", DeviceRPUUID: "rp-2", AttachHandleType: "MDEV"}
	got, err := handlers.CyborgARQs{Cyborg: cyborgLister{arqs: []cyborg.ARQ{pci, mdev}}}.InstanceARQs(context.Background(), "inst-a")
	if err != nil || len(got) != 2 {
		t.Fatalf("got %+v, %v", got, err)
	}
	if a := got[0]; a.Address != "0000:81:00.1" || a.AddressErr != "" || a.UUID != "arq-1" || a.State != "Bound" ||
		a.Hostname != "cmp1" || a.DeviceRPUUID != "rp-1" || a.AttachHandleType != "PCI" {
		t.Errorf("PCI ARQ became %+v", a)
	}
	if a := got[1]; a.Address != "" || a.AddressErr == "" || a.DeviceRPUUID != "rp-2" {
		t.Errorf("MDEV ARQ became %+v; want no address and why", a)
	}
	if _, err := (handlers.CyborgARQs{Cyborg: cyborgLister{err: cyborg.ErrUnresolved}}).InstanceARQs(context.Background(), "inst-a"); !errors.Is(err, cyborg.ErrUnresolved) {
		t.Fatalf("Cyborg's error became %v", err)
	}
}
