// Package placement is the single gate through which scour reads and
// changes OpenStack Placement. Nothing else in scour talks to Placement.
//
// It finds this host's one-time-use (OTU) PCI devices (child resource
// providers of the compute node RP carrying the OTU trait), derives each
// device's state, and performs the only four writes scour makes: Burn
// (reserved=total on an allocated device), Unreserve (the one way a device
// returns to the pool), Quarantine/Unquarantine (a trait that keeps a device
// out of the pool until an operator acts), and optional capability traits.
//
// # States
//
//	             Nova claims (allocation + reserved=total)
//	available ───────────────────────────────▶ burned-in-use
//	(reserved=0,                                (allocated,
//	 no allocations)                             reserved=total)
//	    ▲                                            │ instance freed
//	    │ Unreserve (after a clean pipeline run)      ▼
//	    └──────────────────────────────────────── dirty
//	                                       (reserved=total, no allocations)
//	                                             │ Quarantine ▲ Unquarantine
//	                                             ▼            │ (operator)
//	                                         quarantined (dirty + trait)
//
// in-use is an allocated device whose reserved is still below total (Nova
// before 2025.2, or a device flagged late): Burn moves it to burned-in-use.
// unmanaged is a shape scour does not handle (not exactly one inventory, or
// total != 1, or a name without a PCI address): it is reported and skipped.
//
// # Safety rules
//
// Numbered as in the README and docs/lifecycle.md, whose table names the
// file deciding each rule and the tests proving it. The Gate (gate.go) is
// where this host's decisions are made: the one dirty predicate (Dirty),
// the check before a destructive step (Gate.HasAllocations), the choice
// of un-reserve, and which errors are permanent (IsPermanent).
//
//   - Rule 2: Unreserve reads the inventory and the device's allocations
//     and refuses (ErrAllocated) when any consumer holds the device. Its
//     PUT carries the generation read together with that check; Placement
//     bumps a provider's generation on every allocation change, so an
//     allocation created after the check makes the PUT fail with 409, and
//     the retry re-reads and re-verifies before writing again.
//     UnreserveSeen's one-PUT shortcut is taken only for a read that shows
//     the device Dirty. A device in use is never touched.
//   - Rule 4: Unreserve refuses a quarantined device (ErrQuarantined):
//     only an operator's Unquarantine followed by a clean pipeline run
//     returns it.
//   - Rule 3: device identity (RP UUID, name, PCI address) comes from this
//     host's Placement tree, never from a notification.
//   - Rules 1 and 5: each un-reserve PUT is journaled with its run before
//     it is sent (PutJournal), so a device found un-reserved is scour's
//     return only when a PUT of the run may have landed.
//
// This package's own invariants: every inventory write sends back every
// field exactly as read (raw JSON: Placement resets omitted fields to
// defaults, and gophercloud's Inventory type would send zeros); only
// reserved changes, never below 0 and never above total. Trait writes read
// the current traits and generation, add or remove only scour's own
// trait(s), and retry on generation conflicts: Nova's and operators'
// traits are never dropped.
//
// Errors name the device (RP name, UUID, PCI address) and say what the
// operator should do. Transient failures (network, 5xx, timeouts, conflict
// retries exhausted) are *RecoverableError (IsRecoverable reports it): retry
// later, never quarantine because of them.
package placement
