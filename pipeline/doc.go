// Package pipeline runs a device's cleaning pipeline and returns one
// verdict. It decides nothing about Placement: the caller un-reserves the
// device only on VerdictClean, after the result was stored.
//
//	Clean(target)
//	  |  one run per device (second caller: ErrAlreadyRunning)
//	  v
//	Discover (local hardware) --> match profile --no--> no-profile (stays reserved)
//	  |
//	  v  host and profile concurrency slots
//	OpenRun (checkpoints: resume the open run, or a new one)
//	  |
//	  v  for each step not already succeeded/skipped in THIS run:
//	no driver switch: requirements / plugin CHECK  ||  destructive? HasAllocations
//	  |  (side by side; the step waits for both)
//	  |  in use / no answer --> aborted / retry-later (CHECK cancelled, nothing touched)
//	  |  clear, then unmet --> skip | fail
//	  |  driver switch: HasAllocations first --yes--> aborted
//	  v
//	StepStarted -> [bind driver, requirements / CHECK] -> run with timeout, retries -> [restore driver] -> StepFinished
//	  |
//	  v
//	FinishRun(verdict): clean | retry-later | quarantine | aborted
//
// Every step's start and outcome are persisted before the next step
// starts, so a crash resumes at the first unfinished step: a step that was
// running when the process died runs again from its start (steps are
// idempotent; a sanitize still running inside the drive is joined or
// waited for, not started over: hardware.Real.Sanitize), and steps
// completed in the same open run are not repeated.
// A run that finished (any verdict) is never resumed: the next Clean opens
// a new run and runs every step again, so "clean" always means every
// required step succeeded in one run.
package pipeline
