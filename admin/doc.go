// Package admin is scourd's local admin endpoint: HTTP over a unix socket
// whose file permissions are the access control (mode 0660, owned by
// root and the configured group), so an operator on the host needs no
// Keystone credentials to see the devices' state and to ask scourd to act.
//
//	GET  /v1/status  every one-time-use device of the host: Placement
//	                 state, last verdict, the open run with its step,
//	                 percent and ETA (DeviceStatus)
//	POST /v1/rescan  scan Placement now (after an unquarantine, a fix)
//	POST /v1/clean   ?device=&by= reserve the device (unless allocated)
//	                 and clean it now
//	POST /v1/retire  ?device=&by=&reason= keep the device reserved and
//	                 out of cleaning, recorded with the reason
//
// Status is also what scourctl computes itself, from Placement and the
// store, when scourd's socket is not there.
package admin
