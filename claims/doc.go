// Package claims is scour's memory across restarts: which instance holds
// which one-time-use devices (claims), where each device's cleaning stands
// (runs and their step checkpoints), and the permanent record of every
// cleaning.
//
// The store is embedded sqlite by default (one file per host, pure Go) and
// PostgreSQL when an operator wants one central database. Both run the same
// SQL and the same test suite. The schema is versioned per table in
// scour_schema; Open creates it, upgrades it step by step in a transaction,
// or refuses a database newer than the binary (docs/claims.md).
//
// Claim states:
//
//	       RecordClaim
//	            |
//	            v      MarkDormant (shelve offload)
//	        +--------+ ------------> +---------+
//	        | active |               | dormant |
//	        +--------+ <------------ +---------+
//	         |     |     Reactivate      |
//	SweepOrphans   ReleaseInstance       | ReleaseInstance
//	(no allocation,     |                |
//	 older than expiry) v                v
//	         |     +----------+ <--------+
//	         |     | released |
//	         v     +----------+
//	    +----------+
//	    | orphaned |
//	    +----------+
//
// Cleaning runs:
//
//	OpenRun --> running --StepStarted/StepProgress/StepFinished...--> FinishRun
//	               ^  |                                     returned | quarantined | aborted
//	               +--+ restart: OpenRun returns the same run;       (sealed: never changes again)
//	                    the open step attempt becomes "interrupted"
//	                    and is re-run from its start
//
// Every write is one transaction committed before the method returns, so a
// caller that persists a step's completion before starting the next step
// never skips or silently repeats work after a crash.
package claims
