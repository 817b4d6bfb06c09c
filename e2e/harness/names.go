package harness

import (
	"fmt"
	"sync/atomic"
	"time"
)

var nameSeq atomic.Uint64

// UniqueName returns a name no other test in any run shares, e.g. for a
// compute node, a queue or a vhost: prefix, start time and a counter.
func UniqueName(prefix string) string {
	return fmt.Sprintf("%s-%x-%d", prefix, time.Now().UnixNano()&0xffffffffff, nameSeq.Add(1))
}
