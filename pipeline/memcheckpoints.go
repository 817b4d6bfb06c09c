package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// MemCheckpoints is an in-memory Checkpoints, optionally mirrored to a JSON
// file (written atomically on every change) so a test can kill a process
// and resume from what it stored. It is for tests and tools; the service
// uses the claims store.
type MemCheckpoints struct {
	mu   sync.Mutex
	path string
	st   memState
}

type memState struct {
	Seq  int                `json:"seq"`
	Runs map[string]*memRun `json:"runs"`
	// Attempts counts runs per device since its last clean verdict.
	Attempts map[string]int `json:"attempts"`
}

type memRun struct {
	Run    Run          `json:"run"`
	Open   bool         `json:"open"`
	Steps  []StepRecord `json:"steps"`
	Result *Result      `json:"result,omitempty"`
}

var (
	_ Checkpoints      = (*MemCheckpoints)(nil)
	_ IdentityRecorder = (*MemCheckpoints)(nil)
)

// NewMemCheckpoints returns an empty in-memory store.
func NewMemCheckpoints() *MemCheckpoints {
	return &MemCheckpoints{st: memState{Runs: map[string]*memRun{}, Attempts: map[string]int{}}}
}

// OpenFileCheckpoints loads (or creates) a store persisted at path.
func OpenFileCheckpoints(path string) (*MemCheckpoints, error) {
	m := NewMemCheckpoints()
	m.path = path
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &m.st); err != nil {
		return nil, fmt.Errorf("checkpoint file %s: %w", path, err)
	}
	return m, nil
}

func (m *MemCheckpoints) save() error {
	if m.path == "" {
		return nil
	}
	b, err := json.Marshal(&m.st)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(m.path), ".checkpoints-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), m.path)
}

// OpenRun implements Checkpoints.
func (m *MemCheckpoints) OpenRun(_ context.Context, start RunStart) (Run, []StepRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.st.Runs {
		if r.Open && r.Run.Start.Device == start.Device {
			return r.Run, append([]StepRecord(nil), r.Steps...), nil
		}
	}
	m.st.Seq++
	m.st.Attempts[start.Device]++
	run := Run{ID: fmt.Sprintf("run-%d", m.st.Seq), Attempt: m.st.Attempts[start.Device], Start: start}
	m.st.Runs[run.ID] = &memRun{Run: run, Open: true}
	return run, nil, m.save()
}

func (m *MemCheckpoints) open(runID string) (*memRun, error) {
	r, ok := m.st.Runs[runID]
	if !ok || !r.Open {
		return nil, fmt.Errorf("checkpoints: run %s is not open", runID)
	}
	return r, nil
}

func (m *MemCheckpoints) put(runID string, rec StepRecord) error {
	r, err := m.open(runID)
	if err != nil {
		return err
	}
	for i := range r.Steps {
		if r.Steps[i].Index == rec.Index {
			r.Steps[i] = rec
			return m.save()
		}
	}
	r.Steps = append(r.Steps, rec)
	return m.save()
}

// StepStarted implements Checkpoints.
func (m *MemCheckpoints) StepStarted(_ context.Context, runID string, rec StepRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.put(runID, rec)
}

// StepProgress implements Checkpoints. Progress is not worth a file write.
func (m *MemCheckpoints) StepProgress(_ context.Context, runID string, step int, fraction float64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.open(runID)
	if err != nil {
		return err
	}
	for i := range r.Steps {
		if r.Steps[i].Index == step {
			r.Steps[i].Progress = fraction
		}
	}
	return nil
}

// StepFinished implements Checkpoints.
func (m *MemCheckpoints) StepFinished(_ context.Context, runID string, rec StepRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.put(runID, rec)
}

// FinishRun implements Checkpoints.
func (m *MemCheckpoints) FinishRun(_ context.Context, runID string, res Result) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.open(runID)
	if err != nil {
		return err
	}
	r.Open = false
	r.Result = &res
	if res.Verdict == VerdictClean {
		delete(m.st.Attempts, r.Run.Start.Device)
	}
	return m.save()
}

// Runs returns every run of device, oldest first, with its steps.
func (m *MemCheckpoints) Runs(device string) []Run {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Run
	for i := 1; i <= m.st.Seq; i++ {
		if r, ok := m.st.Runs[fmt.Sprintf("run-%d", i)]; ok && r.Run.Start.Device == device {
			out = append(out, r.Run)
		}
	}
	return out
}

// Result returns the verdict a run was finished with (false while open).
func (m *MemCheckpoints) Result(runID string) (Result, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.st.Runs[runID]; ok && r.Result != nil {
		return *r.Result, true
	}
	return Result{}, false
}

// Steps returns the step records of a run.
func (m *MemCheckpoints) Steps(runID string) []StepRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.st.Runs[runID]; ok {
		return append([]StepRecord(nil), r.Steps...)
	}
	return nil
}

// SetIdentity stores the serial, model and firmware a step's driver revealed.
func (m *MemCheckpoints) SetIdentity(_ context.Context, runID, serial, model, firmware string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.st.Runs[runID]
	if !ok {
		return fmt.Errorf("checkpoints: no run %s", runID)
	}
	r.Run.Start.Serial, r.Run.Start.SerialSource, r.Run.Start.Model, r.Run.Start.Firmware = serial, "", model, firmware
	return m.save()
}
