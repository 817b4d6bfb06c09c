// Package hardware discovers what the one-time-use PCI devices of this host
// are and can do, and performs the hardware actions of a cleaning pipeline.
// It is the only package in scour that reads sysfs or runs hardware tools.
//
//	sysfs (FS) ──┐
//	nvme-cli ────┤                    ┌─ Device{facts, Absent reasons}
//	nvidia-smi ──┼─ Runner ─ Real ────┤
//	devlink ─────┘                    └─ Capabilities ─ merged with Config's
//	                                     declared ones ─ Requirements.Match
//
// Capabilities are booleans, sets or ordered sets (KnownCapabilities lists
// the names; docs/hardware.md documents them). Requirements use the same
// three forms with comparison operators for ordered sets. Tools run through
// a Runner whose ExecRunner kills the tool's whole process group when its
// context ends. The simulator (hardware/sim) implements the same Backend
// over files; hardware/hardwaretest holds the suite both pass.
package hardware
