// Package handlerstest holds in-memory fakes of the interfaces the
// handlers package declares (Placement, Claims, Hardware, Cleaner), for
// the handlers' own tests and for anyone testing code that wires them.
//
// World is a tiny in-memory Placement: devices with inventory and
// allocations, and the Nova actions tests need (allocate with or without
// burning, free, move an allocation to a migration consumer). The fakes
// follow the house style: default in-memory behaviour, and function fields
// (ScanHostF, CleanF, ...) that replace one call when a test sets them.
package handlerstest
