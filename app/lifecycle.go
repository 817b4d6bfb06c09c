package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scour-project/scour/admin"
	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/claims/handlerstore"
	"github.com/scour-project/scour/claims/pipelinestore"
	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/hardware"
	hwbackend "github.com/scour-project/scour/hardware/backend"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
)

// hostLockCheck is how often scourd checks that it still holds its host
// lock (on PostgreSQL: that the session holding it is alive).
const hostLockCheck = 5 * time.Second

// setupTimeout bounds what building the lifecycle may spend talking to
// Placement (microversion negotiation) and opening the claims store.
const setupTimeout = time.Minute

// lifecycle is the device side of scourd: Placement gate, claims store,
// hardware backend, pipeline engine, handlers and reconciler.
type lifecycle struct {
	store      *claims.Store
	placement  *placement.Client
	hardware   hardware.Backend
	engine     *pipeline.Engine
	handler    *handlers.Handler
	reconciler *handlers.Reconciler
	operator   handlers.Operator
	log        *slog.Logger
	retention  time.Duration
	host       string
}

// newLifecycle builds the lifecycle from cfg. It opens the claims store
// (creating or upgrading its schema) and negotiates Placement's
// microversion; everything else waits for run.
func newLifecycle(cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) (*lifecycle, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	signer, kf, err := claims.LoadOrCreateKey(cfg.Claims.SigningKeyPath())
	if err != nil {
		return nil, nil, fmt.Errorf("claims store: %w (claims.signing_key)", err)
	}
	heads := newChainHeads(log, reg)
	logKeyFiles(log, cfg.Claims.SigningKeyPath(), signer, kf)
	if kf.Created {
		heads.events.WithLabelValues("key_created").Inc()
	}
	// The host lock: a second scourd on this store (a container beside
	// the systemd unit sharing /var/lib/scour; on PostgreSQL, a second
	// machine with the same host) fails here instead of cleaning this
	// host's devices at the same time. One with the same host on another
	// store is not caught (docs/claims.md, One scourd per host).
	store, err := claims.Open(ctx, cfg.Claims, claims.WithLogger(log), claims.WithSigner(signer), claims.WithHostLock(cfg.Host),
		claims.WithChainHead(heads.advanced))
	if err != nil {
		return nil, nil, fmt.Errorf("claims store: %w", err)
	}
	cleanup := func() { _ = store.Close() }
	fail := func(err error) (*lifecycle, func(), error) { cleanup(); return nil, nil, err }
	// Before anything is written under cfg.Host.
	if err := cfg.CheckDefaultHost(ctx, store); err != nil {
		return fail(err)
	}
	if err := cfg.CheckRenamedHost(ctx, store); err != nil {
		return fail(err)
	}
	if err := store.RegisterKey(ctx, cfg.Host); err != nil {
		return fail(err)
	}
	if err := heads.started(ctx, store, cfg.Host); err != nil {
		return fail(err)
	}
	if n, err := store.IndexClaimDevices(ctx, cfg.Host); err != nil {
		return fail(err)
	} else if n > 0 {
		log.Info("claims indexed by device (recorded by an older scour after the schema upgrade)", "devices", n)
	}

	pc, err := placement.New(ctx, cfg.Placement, placement.WithLogger(log), placement.WithRegisterer(reg))
	if err != nil {
		return fail(fmt.Errorf("placement: %w", err))
	}
	gate := placement.NewGate(pc, func(runID string) placement.PutJournal { return store.PutJournal(runID) })
	var _ pipeline.DatedChecker = gate // the pipeline dates a reused read's answer by the read
	be, err := hwbackend.Open(cfg.Hardware, log)
	if err != nil {
		return fail(fmt.Errorf("hardware: %w", err))
	}
	imgs, err := newImageResolver(cfg, pc, log, reg)
	if err != nil {
		return fail(fmt.Errorf("images: %w", err))
	}
	pcfg := cfg.Pipelines
	eng, err := pipeline.New(pcfg, pipeline.Options{
		Images:  imgs,
		Backend: be,
		Checkpoints: &pipelinestore.Checkpoints{Store: store, Host: cfg.Host,
			Trigger: "scourd reconciler", Optional: pcfg.StepOptional},
		Allocations: gate,
		Registerer:  reg,
		Logger:      log,
	})
	if err != nil {
		// Its values were validated before start (config.LoadChecked):
		// what is left is the plugins' deployment (a plugin gone or not
		// answering since), which installing it fixes: exit 1, restarted.
		return fail(fmt.Errorf("pipelines: %w", err))
	}
	h, rec, err := handlers.New(cfg.Lifecycle.Config, handlers.Deps{
		Placement:    handlers.OverGate(gate),
		Claims:       &handlerstore.Claims{Store: store, Host: cfg.Host},
		Hardware:     hardware.Presence{Backend: be},
		Cleaner:      handlers.EngineCleaner{Engine: eng, Records: store, Host: cfg.Host},
		Accelerators: newAccelerators(pc),
		Registerer:   reg,
		Logger:       log,
		OnStuck: func(d handlers.Device, running time.Duration) {
			log.Error("cleaning run stuck: check the device and the pipeline's step timeouts",
				"device", d.Address, "rp", d.RPUUID, "running", running.Round(time.Second))
		},
	})
	if err != nil {
		return fail(fmt.Errorf("lifecycle: %w", err))
	}
	return &lifecycle{store: store, placement: pc, hardware: be, engine: eng, handler: h,
		reconciler: rec, operator: handlers.Operator{Records: store, Host: cfg.Host}, log: log, retention: cfg.Claims.RecordRetention, host: cfg.Host}, cleanup, nil
}

// run drives the reconciler and the record retention until ctx ends, then
// waits for in-flight cleans to stop at their checkpoints. When the host
// lock is lost it stops the same way and returns that error: another
// scourd may be cleaning this host's devices now.
func (l *lifecycle) run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	lost := make(chan error, 1)
	go func() {
		defer stop()
		lost <- holdHostLock(ctx, l.store.CheckHostLock, hostLockCheck)
	}()
	// Before the first scan can resume a cleaned run and un-reserve it.
	l.settleReturns(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.maintenanceLoop(ctx)
	}()
	err := l.reconciler.Run(ctx)
	<-done
	stop()
	if lockErr := <-lost; lockErr != nil {
		return lockErr
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// holdHostLock checks the host lock every interval until ctx ends (nil)
// or a check fails (its error). A check that cannot tell counts as lost:
// stopping is safe, going on without the lock is not.
func holdHostLock(ctx context.Context, check func(context.Context) error, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, every)
		err := check(cctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// maintenanceLoop settles cleaned records whose un-reserve happened (or
// became moot) unrecorded (hourly; run does it at start) and applies the
// record retention.
func (l *lifecycle) maintenanceLoop(ctx context.Context) {
	if l.placement.Config().PublishCapabilityTraits {
		l.log.Warn("placement.publish_capability_traits is ignored: Nova sets the traits of its PCI device providers to its own set on every update, so scour no longer writes capability traits; put them in nova.conf's [pci] device_spec (scourctl nova-device-spec prints the entries) and remove the setting")
	}
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for first := true; ; first = false {
		if !first { // at start, run did it before the reconciler
			l.settleReturns(ctx)
		}
		if runs, cl, err := l.store.Purge(ctx, l.host); err != nil && ctx.Err() == nil {
			l.log.Warn("record retention purge failed; retried in an hour", "err", err)
		} else if runs+cl > 0 {
			l.log.Info("record retention purge", "runs", runs, "claims", cl)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Status is the admin socket's device list: a Placement scan joined with
// the store's runs (progress and ETA of running steps); while Placement
// does not answer, the store's open runs and quarantines with why.
func (l *lifecycle) Status(ctx context.Context) (admin.Report, error) {
	return admin.HostReport(ctx, l.scan, l.store, l.host, time.Now())
}

// scan is this host's devices in Placement.
func (l *lifecycle) scan(ctx context.Context) ([]placement.Device, error) {
	res, err := l.placement.Scan(ctx)
	if err != nil {
		return nil, err
	}
	return res.Devices, nil
}

// Rescan makes the reconciler scan now (debounced like every trigger).
func (l *lifecycle) Rescan(reason string) { l.reconciler.Trigger(reason) }

// settleReturns closes the cleaned records a crash left between the
// un-reserve and its recording, from what Placement shows now
// (claims.Store.SettleReturns decides, from handlers.DeviceNow).
func (l *lifecycle) settleReturns(ctx context.Context) {
	n, err := l.store.SettleReturns(ctx, l.host, handlers.DeviceNow(l.placement.Device))
	// Counted, and fenced again, even when a later run failed: these
	// were decided.
	l.reconciler.SettledReturns(n)
	if err != nil && ctx.Err() == nil {
		l.log.Warn("settling cleaned records waiting for their un-reserve failed; retried in an hour", "err", err)
	} else if n.Returned+n.Closed > 0 {
		l.log.Info("cleaned records settled from Placement", "returned", n.Returned, "closed", n.Closed, "unreserved_elsewhere", n.Elsewhere)
	}
}

// Clean has an operator's device cleaned now: a device nobody holds is
// reserved (so Nova cannot schedule it meanwhile) and the reconciler scans
// at once and cleans it as any dirty device, with the full pipeline and
// its allocation checks. A device in use or quarantined is refused
// (handlers.Operator.CleanRefusal decides).
func (l *lifecycle) Clean(ctx context.Context, device, by string) (string, error) {
	d, err := l.operatorDevice(ctx, device)
	if err != nil {
		return "", err
	}
	if err := l.operator.CleanRefusal(ctx, d); err != nil {
		return "", err
	}
	// A run of the device in flight around Reserve may have its own
	// un-reserve PUT in flight: Reserve then reads reserved = total and
	// writes nothing, and the PUT lands after (handlers.CleanReport).
	before := l.reconciler.RunMark(d.UUID)
	if err := l.placement.Reserve(ctx, d.Ref); err != nil {
		return "", err
	}
	after := l.reconciler.RunMark(d.UUID)
	l.log.Info("operator asked to clean the device; Placement shows it reserved, and a scan follows now", "device", d.Name, "rp", d.UUID, "address", d.Address, "by", by,
		"run_in_flight", handlers.RanDuring(before, after), "backoff_until", after.BackoffUntil)
	l.reconciler.Trigger("operator clean by " + by)
	return handlers.CleanReport(d, before, after), nil
}

// Retire keeps an operator's device reserved and out of cleaning, with
// the reason recorded in the store (the authority) and the quarantine
// trait in Placement, until scourctl placement unquarantine. The store is
// written first; a failed Placement write is repeated by every scan.
//
// A device not cleaned since its last tenant is wiped before it leaves
// (handlers.Operator.RetireWipe decides): the retirement waits for a
// retirement run, which the reconciler starts once nothing holds the
// device (rule 2) and resumes after a crash (rule 5), the device
// quarantined throughout (rule 4). With noWipe that run only records it
// NOT WIPED (operator chose --no-wipe). Retire returns once the retirement is recorded.
func (l *lifecycle) Retire(ctx context.Context, device, by, reason string, noWipe bool) (string, error) {
	d, err := l.operatorDevice(ctx, device)
	if err != nil {
		return "", err
	}
	wipe, note, err := l.operator.RetireWipe(ctx, d, noWipe)
	if err != nil {
		return "", err
	}
	outcome, q, err := l.store.Retire(ctx, l.host, d.UUID, string(d.Address), by, reason, wipe, note)
	if err != nil {
		return "", err
	}
	if err := l.placement.Quarantine(ctx, d.Ref, "retired by "+by+": "+reason); err != nil {
		// The store holds the retirement: every scan sets reserved=total
		// and the trait again until Placement takes them (handlers'
		// keepQuarantined). Scan now rather than at the next interval.
		l.reconciler.Trigger("operator retire by " + by + " (Placement write failed)")
		return "", fmt.Errorf("recorded the retirement of device %s, but Placement was not updated: scourd sets reserved=total and the quarantine trait again at every scan until Placement accepts them; until then Nova may schedule the device (check Placement, then scourctl status): %w", d.Address, err)
	}
	l.log.Warn("device retired by an operator: it stays reserved until released", "device", d.Name, "rp", d.UUID, "address", d.Address,
		"by", by, "reason", reason, "wipe", q.Wipe, "note", note)
	l.reconciler.Trigger("operator retire by " + by)
	return handlers.RetireReport(d, outcome, q, wipe, note), nil
}

// operatorDevice finds the device an operator named, in a fresh scan.
func (l *lifecycle) operatorDevice(ctx context.Context, device string) (placement.Device, error) {
	res, err := l.placement.Scan(ctx)
	if err != nil {
		return placement.Device{}, fmt.Errorf("scanning this host in Placement: %w", err)
	}
	return admin.FindDevice(res.Devices, device)
}

// logKeyFiles says what became of the record-signing key files: a created
// key, and a public key file rewritten for it (the operator archives that
// file; a stale one would reject every new record).
func logKeyFiles(log *slog.Logger, path string, signer *claims.Signer, kf claims.KeyFiles) {
	keyID := claims.KeyID(signer.PublicKey())
	if kf.Created {
		log.Warn("record signing key created: expected at a host's first start; anywhere else the state directory was lost, and the records this host signs from now on verify only with the new key (keep it private, back it up, archive its public key outside the host; records signed before need the old one)",
			"path", path, "public_key", kf.PubPath, "key_id", keyID)
	}
	switch {
	case kf.PubErr != nil:
		log.Warn("record signing public key file is missing or holds another key, and could not be rewritten (a read-only directory?): records are signed and verify with the key below, but the file operators archive is wrong; "+
			"get the public key with `scourctl records pubkey` and archive it, or make the directory writable", "public_key", kf.PubPath, "key_id", keyID, "error", kf.PubErr)
	case kf.OldKeyID != "":
		log.Warn("record signing key changed: its public key file held another key and was rewritten; archive the new public key outside the host, "+
			"and keep the old one to verify the records it signed", "public_key", kf.PubPath, "key_id", keyID,
			"old_public_key", kf.OldPub, "old_key_id", kf.OldKeyID)
	case kf.OldPub != "":
		log.Warn("record signing public key file did not parse and was rewritten; archive the new public key outside the host",
			"public_key", kf.PubPath, "key_id", keyID, "old_content", kf.OldPub)
	case kf.PubWritten && !kf.Created:
		log.Info("record signing public key file was missing and was written", "public_key", kf.PubPath, "key_id", keyID)
	}
}
