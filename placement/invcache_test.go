package placement

import (
	"fmt"
	"testing"
)

// Reads of one device may finish out of order: an older generation never
// replaces a newer one. A write forgets the device; a scan keeps only its
// tree's devices; past invCacheMax everything is dropped, never grown.
func TestInvCacheKeepsNewestAndStaysBounded(t *testing.T) {
	var ic invCache
	ic.put("a", &rawInventory{Generation: 5})
	ic.put("a", &rawInventory{Generation: 4})
	if got := ic.get("a"); got == nil || got.Generation != 5 {
		t.Fatalf("after reads at 5 then 4: remembered %+v, want generation 5", got)
	}
	ic.put("a", &rawInventory{Generation: 6})
	if got := ic.get("a"); got.Generation != 6 {
		t.Fatalf("after a read at 6: remembered generation %d, want 6", got.Generation)
	}
	ic.forget("a")
	if got := ic.get("a"); got != nil {
		t.Fatalf("after forget: remembered %+v, want nothing", got)
	}
	ic.put("a", &rawInventory{Generation: 1})
	ic.put("b", &rawInventory{Generation: 1})
	ic.keepOnly(map[string]bool{"b": true})
	if ic.get("a") != nil || ic.get("b") == nil {
		t.Fatalf("keepOnly(b): a=%v b=%v, want a dropped and b kept", ic.get("a"), ic.get("b"))
	}
	for i := range invCacheMax + 10 {
		ic.put(fmt.Sprint("rp", i), &rawInventory{})
	}
	if n := len(ic.m); n > invCacheMax {
		t.Fatalf("%d inventories remembered, want at most %d", n, invCacheMax)
	}
}
