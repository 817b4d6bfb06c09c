package harness

import (
	"fmt"
	"os"
	"strconv"
)

// PlacementMode is how the Placement container serves requests: from which
// database, with how many uwsgi worker processes (one thread each).
type PlacementMode struct {
	DB      string // "postgresql" or "sqlite"; "" for an external Placement
	Workers int    // requests Placement answers at once; 0 when unknown
}

// defaultPlacementWorkers is 4: production Placement runs a handful of
// single-threaded processes per API host, and 4 is what it takes for scour's
// concurrent calls (a scan reads 4 providers at once, cleanings un-reserve
// in parallel) to meet in Placement instead of queueing in front of it.
// Each worker costs about 100 MB and loads the app at container start; on
// the 2-core machines these tests run on, more buy no throughput.
const defaultPlacementWorkers = 4

// placementMode reads EnvPlacementDB and EnvPlacementWorkers.
func placementMode() (PlacementMode, error) {
	m := PlacementMode{DB: os.Getenv(EnvPlacementDB), Workers: defaultPlacementWorkers}
	switch m.DB {
	case "", "postgresql":
		m.DB = "postgresql"
	case "sqlite":
		m.Workers = 1
	default:
		return m, fmt.Errorf("%s=%q: want postgresql (the default) or sqlite", EnvPlacementDB, m.DB)
	}
	if w := os.Getenv(EnvPlacementWorkers); w != "" {
		n, err := strconv.Atoi(w)
		if err != nil || n < 1 {
			return m, fmt.Errorf("%s=%q: want a positive number of uwsgi worker processes", EnvPlacementWorkers, w)
		}
		// sqlite with several workers is Placement's packaged default on a
		// small deployment (concurrent writers get 500 "database is
		// locked"): tests use 1, make bench-lifecycle 4 to show that case.
		m.Workers = n
	}
	return m, nil
}

// env is what the image's placement-start reads.
func (m PlacementMode) env() map[string]string {
	return map[string]string{"PLACEMENT_DB": m.DB, "PLACEMENT_WORKERS": strconv.Itoa(m.Workers)}
}

func (m PlacementMode) String() string {
	if m.DB == "" {
		return "external"
	}
	return fmt.Sprintf("%s, %d uwsgi worker(s)", m.DB, m.Workers)
}
