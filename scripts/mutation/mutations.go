package main

// mutation is one deliberate small change to the decision code of a
// safety rule: Old (exactly once in File) becomes New, and a unit test of
// Run (a go test -run pattern, package Pkg) must then fail.
type mutation struct {
	Rule     int
	Name     string
	File     string
	Old, New string
	Pkg      string
	Run      string
}

// mutations is the table docs/lifecycle.md lists (go run
// ./scripts/mutation -list prints it). At least three per rule.
var mutations = []mutation{
	// Rule 1: a device returns to the pool only after every required step
	// of its pipeline succeeded in that run and the record was stored.
	{1, "failed required step ignored", "pipeline/run.go",
		"if rec.State != StepFailed || (!*s.Required && !verificationRefused(rec)) {",
		"if true || rec.State != StepFailed || (!*s.Required && !verificationRefused(rec)) {",
		"pipeline", "^TestVerdicts$"},
	{1, "verdict returned though it was not stored", "pipeline/engine.go",
		"if err := e.cp.FinishRun(ctx, res.RunID, *res); err != nil {",
		"if err := e.cp.FinishRun(ctx, res.RunID, *res); err != nil && false {",
		"pipeline", "^TestUnstoredVerdictIsNoVerdict$"},
	{1, "un-reserve after a retry-later verdict", "handlers/clean.go",
		"\tcase pipeline.VerdictRetryLater:\n",
		"\tcase pipeline.VerdictRetryLater:\n\t\treturn r.unreserve(ctx, log, d, res)\n",
		"handlers", "^TestVerdicts$"},
	{1, "un-reserve by someone else taken as scour's return", "placement/unreserve.go",
		"\t\t\tif !ps.ours() {\n",
		"\t\t\tif false && !ps.ours() {\n",
		"placement", "^TestUnreserve"},

	// Rule 2: nothing destructive runs, and no un-reserve happens, while
	// Placement shows an allocation on the device.
	{2, "dropped allocation check in the dirty predicate", "placement/gate.go",
		"return FullyReserved(total, reserved) && !inUse && !quarantined",
		"return FullyReserved(total, reserved) && !quarantined",
		"placement", "^TestGate"},
	{2, "shortcut un-reserve does not look at usage", "placement/seen.go",
		"d.raw.Generation == d.Generation && d.Dirty() &&",
		"d.raw.Generation == d.Generation &&",
		"placement", "^TestGateUnreserveChoosesBySeenRead$"},
	{2, "un-reserve ignores a consumer", "placement/unreserve.go",
		"\tif len(who) > 0 {\n\t\treturn nil, fmt.Errorf(\"%w: consumers %v hold %d unit(s)\", ErrAllocated",
		"\tif len(who) > 1 {\n\t\treturn nil, fmt.Errorf(\"%w: consumers %v hold %d unit(s)\", ErrAllocated",
		"placement", "^TestUnreserveErrorShapes$"},
	{2, "usage without a listed consumer counted free", "placement/gate.go",
		"func (d Device) InUse() bool { return d.Used > 0 || len(d.Consumers) > 0 }",
		"func (d Device) InUse() bool { return len(d.Consumers) > 0 }",
		"placement", "^TestGateDirtyPredicate$"},
	{2, "retirement wipe allowed on an allocated device", "placement/gate.go",
		"return FullyReserved(total, reserved) && !inUse && quarantined",
		"return FullyReserved(total, reserved) && quarantined",
		"placement", "^TestGate"},
	{2, "destructive step starts before the Placement answer", "pipeline/step.go",
		"\tstop := r.placementClear(ctx, s, \"\")\n",
		"\tvar stop error\n\tgo r.placementClear(ctx, s, \"\")\n",
		"pipeline", "^TestAllocationAbortsBeforeDestructiveStep$|^TestPlacementDecidesBeforeTheCheck$"},
	{2, "step starts on a Placement answer older than its CHECK", "pipeline/step.go",
		"if time.Since(answered) >= r.e.placementAnswerMaxAge {",
		"if false && time.Since(answered) >= r.e.placementAnswerMaxAge {",
		"pipeline", "^TestPlacementAskedAgainAfterASlowCheck$"},
	{2, "operator clean of a device in use goes on", "handlers/operator.go",
		"\tcase len(d.Consumers) > 0:\n",
		"\tcase false && len(d.Consumers) > 0:\n",
		"handlers", "^TestOperatorCleanRefusal$"},
	{2, "pre-destructive check reuses a read twice", "placement/gate.go",
		"\td.readAt = time.Time{}\n\tg.seen[rp] = d\n",
		"\tg.seen[rp] = d\n",
		"placement", "^TestCheckReusesReadOnlyOnce$"},
	{2, "claim listing no longer forbids the quarantine trait", "placement/instance.go",
		`c.listManaged(ctx, node, ",!"+c.cfg.QuarantineTrait)`,
		`c.listManaged(ctx, node, "")`,
		"placement", "^TestClaimMatchesQuarantinedAllocatedDevice$"},
	{2, "pre-destructive check reuses a read outside the window", "placement/seen.go",
		"return age >= 0 && age <= w && c.unreservable(d)",
		"return age >= 0 && c.unreservable(d)",
		"placement", "^TestCheckReuseOnlyFreshCompleteDirtyReads$"},

	// Rule 3: device identity comes from this host's Placement tree plus
	// local hardware discovery plus config, never from a notification.
	{3, "discovery error counted as present", "hardware/presence.go",
		"return false, fmt.Errorf(\"hardware discovery: %w\", err)",
		"_ = fmt.Errorf\n\t\treturn true, nil",
		"hardware", "^TestPresenceOnlyFromDiscovery$"},
	{3, "any listed device counts as present", "hardware/presence.go",
		"return slices.Contains(addrs, addr), nil",
		"return len(addrs) > 0 || slices.Contains(addrs, addr), nil",
		"hardware", "^TestPresenceOnlyFromDiscovery$"},
	{3, "absent device cleaned anyway", "handlers/scan.go",
		"\tif !ok {\n\t\tr.log.Warn(\"dirty device in Placement is not a PCI device of this host",
		"\tok = true\n\tif !ok {\n\t\tr.log.Warn(\"dirty device in Placement is not a PCI device of this host",
		"handlers", "^TestReconcilerReachesEndState$"},

	// Rule 4: cleaning failure or retirement keeps the device reserved,
	// visibly.
	{4, "store quarantine honoured only when Placement shows the trait", "handlers/engine.go",
		"\tif quarantined {\n",
		"\tif quarantined && req.Device.Quarantined {\n",
		"handlers", "^TestStoreQuarantineRefusesCleaningWhateverPlacementShows$"},
	{4, "quarantined device counted dirty", "placement/gate.go",
		"return FullyReserved(total, reserved) && !inUse && !quarantined",
		"return FullyReserved(total, reserved) && !inUse",
		"placement", "^TestGate"},
	{4, "un-reserve of a quarantined device", "placement/unreserve.go",
		"\t\tif slices.Contains(traits, c.cfg.QuarantineTrait) {\n",
		"\t\tif false && slices.Contains(traits, c.cfg.QuarantineTrait) {\n",
		"placement", "^TestUnreserveErrorShapes$"},
	{4, "lost fence not restored while the trait is there", "handlers/quarantines.go",
		"if placement.QuarantineHeld(d.Total, d.Reserved, d.Quarantined) {",
		"if d.Quarantined {",
		"handlers", "^TestScan|^TestNovaTraitReplacementRestoresQuarantine$"},
	{4, "operator clean of a device quarantined only in the store goes on", "handlers/operator.go",
		"\tif held {\n",
		"\tif false && held {\n",
		"handlers", "^TestOperatorCleanRefusal$"},
	{4, "retirement of a device used since its last clean skips its wipe", "handlers/operator.go",
		"\t\tdirty = ok\n",
		"\t\tdirty = false && ok\n",
		"handlers", "^TestOperatorRetireWipe$"},

	// Rule 5: a crash at any point loses nothing: resume, don't skip.
	{5, "skipped journal write before the un-reserve PUT", "placement/journal.go",
		"\tif !earlier {\n\t\tif err := p.j.NotePut(ctx, gen); err != nil {",
		"\tif false {\n\t\tif err := p.j.NotePut(ctx, gen); err != nil {",
		"placement", "^TestUnreserve"},
	{5, "failed step counted done on resume", "pipeline/run.go",
		"rec.Index == i && rec.Name == name && rec.done() {",
		"rec.Index == i && rec.Name == name {",
		"pipeline", "^TestResume|^TestCrashResume$"},
	{5, "device changed after a possibly landed PUT taken as returned", "placement/journal.go",
		"\tcase !p.pending || gen == p.gen:\n",
		"\tcase true:\n",
		"placement", "^TestUnreserve"},
	{5, "cleaned record settled as returned while Placement still shows it reserved", "handlers/operator.go",
		"claims.DeviceNow{Reserved: d.Fenced(), Allocated: d.InUse()}",
		"claims.DeviceNow{Allocated: d.InUse()}",
		"handlers", "^TestDeviceNowForSettleReturns$"},
}
