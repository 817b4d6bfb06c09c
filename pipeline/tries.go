package pipeline

import (
	"errors"

	"github.com/scour-project/scour/plugins"
)

// tries is what a step's attempts leave for its record besides
// StepRecord.Attempts.
type tries struct {
	// sha256 is the plugin file's SHA-256 as the runner read it just
	// before starting it, the last time it did.
	sha256 string
}

// ran keeps what one attempt's outcome says about the tool that ran.
func (t *tries) ran(res *plugins.Result, err error) {
	var pe *plugins.Error
	switch {
	case res != nil && res.SHA256 != "":
		t.sha256 = res.SHA256
	case errors.As(err, &pe) && pe.SHA256 != "":
		t.sha256 = pe.SHA256
	}
}
