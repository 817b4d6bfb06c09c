package builtin

import (
	"context"
	"errors"
	"fmt"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// nvme-wear-check reads the smart log (`nvme smart-log -o json`) and
// retires the device when it is worn: percent_used at or above
// max_percent_used (default 90), a critical_warning bit other than
// "temperature", or avail_spare below spare_thresh. The temperature bit
// alone fails the step to be tried again later: it clears once the drive
// cools (it is often hot right after a heavy tenant or an overwrite). It
// records the values either way.
func init() {
	register(Spec{
		Name:     "nvme-wear-check",
		InDevice: true,
		Does:     "nvme smart-log <ctrl> -o json; retire when percent_used >= max_percent_used, critical_warning has a bit other than 1 (temperature) or avail_spare < spare_thresh (a threshold of 0 is none); try again later when temperature is the only reason",
		Run:      wearCheck,
		Needs:    nvmeDriver,
		Tools:    nvmeCLI,
		CheckArgs: func(a map[string]any) error {
			_, err := wearThreshold(a)
			return errors.Join(onlyArgs(a, "max_percent_used"), err)
		},
	})
}

// criticalWarningTemperature is critical_warning bit 1: a temperature is
// above its over-temperature threshold or below its under-temperature one.
// The controller clears it when the temperature is back in range.
const criticalWarningTemperature = 1 << 1

func wearThreshold(a map[string]any) (int64, error) {
	n, err := argInt(a, "max_percent_used", 90)
	if err == nil && (n < 1 || n > 255) {
		err = fmt.Errorf("max_percent_used: %d is outside 1..255", n)
	}
	return n, err
}

func wearCheck(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	limit, err := wearThreshold(t.Args)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	sl, err := be.SmartLog(ctx, t.Device.Address)
	if err != nil {
		return nil, fmt.Errorf("reading smart log of %s: %w", t.Device.Address, err)
	}
	details := map[string]any{
		"percent_used":     sl.PercentUsed,
		"critical_warning": sl.CriticalWarning,
		"avail_spare":      sl.AvailSpare,
		"spare_thresh":     sl.SpareThresh,
		"max_percent_used": limit,
	}
	var why []string
	if int64(sl.PercentUsed) >= limit {
		why = append(why, fmt.Sprintf("percent_used %d >= %d", sl.PercentUsed, limit))
	}
	if sl.CriticalWarning&^criticalWarningTemperature != 0 {
		why = append(why, fmt.Sprintf("critical_warning %#x", sl.CriticalWarning))
	}
	// A spare threshold of 0 means the controller sets none (QEMU's
	// synthetic log reports spare 0 and threshold 0): nothing to compare.
	if sl.SpareThresh > 0 && sl.AvailSpare < sl.SpareThresh {
		why = append(why, fmt.Sprintf("avail_spare %d%% < spare_thresh %d%%", sl.AvailSpare, sl.SpareThresh))
	}
	if len(why) > 0 {
		return nil, &plugins.Error{Code: plugins.CodeRetire, Details: details,
			Msg: fmt.Sprintf("NVMe %s is worn out (%v): retire it and replace the drive", t.Device.Address, why)}
	}
	if sl.CriticalWarning&criticalWarningTemperature != 0 {
		return nil, &plugins.Error{Code: plugins.CodeTryAgainLater, Details: details,
			Msg: fmt.Sprintf("NVMe %s has a temperature outside its thresholds (critical_warning %#x, bit 1 only): it stays reserved and the check runs again later; if it persists, check the cooling", t.Device.Address, sl.CriticalWarning)}
	}
	t.progress(1)
	return plugins.OK(details), nil
}
