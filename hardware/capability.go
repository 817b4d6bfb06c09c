package hardware

// ValueKind is one of the three capability shapes (Nova's "expose host
// capabilities" design): boolean, set, ordered set.
type ValueKind uint8

const (
	KindBool    ValueKind = iota + 1
	KindSet               // unordered set of strings
	KindOrdered           // ordered set: later elements supersede earlier ones
)

// Value is one capability value. Items holds a set's members, or an
// ordered set's elements in order (for example the sanitize methods a
// controller supports, ordered overwrite < block < crypto, or a firmware
// version as a single element compared by version order).
type Value struct {
	Kind  ValueKind
	Bool  bool
	Items []string
}

// Capabilities maps a capability name ("nvme.sanitize", "pci.reset") to its
// value. An unset capability counts as absent.
type Capabilities map[string]Value
