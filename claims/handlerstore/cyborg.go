package handlerstore

import (
	"context"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/handlers"
)

var _ handlers.ARQStore = (*Claims)(nil)

// RecordARQ stores the ARQ record for Host.
func (s *Claims) RecordARQ(ctx context.Context, r handlers.ARQRecord) error {
	result := "mismatch"
	if r.Agree {
		result = "agree"
	}
	return s.Store.RecordARQ(ctx, claims.ARQRecord{Host: s.Host, Instance: r.Instance, DeviceRP: r.DeviceRP, ARQ: r.ARQ,
		ARQDeviceRP: r.ARQDeviceRP, ARQHostname: r.ARQHostname, AttachHandleType: r.AttachHandleType,
		Address: string(r.Address), Result: result, Detail: r.Detail})
}

// ARQRecorded says whether Host has the instance's record for the device.
func (s *Claims) ARQRecorded(ctx context.Context, instance, rpUUID string) (bool, error) {
	return s.Store.ARQRecorded(ctx, s.Host, instance, rpUUID)
}
