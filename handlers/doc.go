// Package handlers joins scour's parts into the device lifecycle: the
// per-host intake calls Handler.Handle with each command, and the
// Reconciler (in this package, so both share one set of types) scans this
// host's Placement tree and drives every one-time-use device to its end
// state. Events only make scour fast; the reconciler makes it correct.
//
// The package declares the small interfaces it needs (Placement, Claims,
// Hardware, Cleaner) with its own plain types; the real placement gate,
// claims store and pipeline engine satisfy them directly or through the
// adapters here (OverGate, EngineCleaner, CyborgARQs), and scourd's app
// only wires them. handlerstest holds in-memory fakes of all four. The
// operator commands' decisions on one device (Operator: scourctl clean's
// refusal, scourctl retire's wipe and answer) and the bus's poison
// decision (Intake) live here too.
//
// Device states (from Placement, plus scour's own while cleaning):
//
//	               burn (Nova, or scour when Nova did not)
//	available ──allocate──▶ in-use ──────────────────▶ burned-in-use
//	    ▲                                                   │ allocation removed
//	    │                                                   ▼ (delete, move, shelve)
//	    │ Unreserve                                       dirty ◀─────────────┐
//	    │ (verdict clean,                                   │ scan: not         │ retry-later,
//	    │  no allocation)                                   │ allocated, present│ error, no-profile
//	    │                                                   ▼ locally           │ (per-device backoff)
//	    └────────────────────────────────────────────── cleaning ──────────────┘
//	                                                        │ verdict quarantine
//	                                                        ▼
//	operator un-quarantines ─▶ dirty ◀────────────────── quarantined (reserved, trait)
//
// aborted (the device got allocated during the run) leads back to
// in-use/burned-in-use: the device is left alone.
//
// Safety rules (numbered as in the README and docs/lifecycle.md, whose
// table names the file deciding each) and where this package keeps them:
//  1. Unreserve is called only on pipeline.VerdictClean (cleanOne); the
//     cleaner stores the record before it returns clean.
//  2. A clean starts only for a device the latest scan shows dirty
//     (Device.Dirty, by the one predicate placement.Dirty; classify drops
//     queued devices that became allocated); the pipeline asks the gate
//     again before its first destructive step, and the gate re-checks
//     inside Unreserve (placement.ErrAllocated → left alone).
//  3. Devices come from ScanHost/InstanceAllocations (this host's tree)
//     and Hardware.Present; a command only names an instance, so a forged
//     one can at most cause a scan.
//  4. A device the claims store holds quarantined is never cleaned
//     (EngineCleaner) nor taken for an operator's clean
//     (Operator.CleanRefusal); every scan restores a lost trait or
//     reservation (quarantines.go); quarantine, no-profile, retry-later and errors
//     keep the device reserved, with an error log line and a metric.
//  5. The start scan re-finds every dirty device and the cleaner resumes
//     its open run; nothing is remembered only in memory except backoff.
package handlers
