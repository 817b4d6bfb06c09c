package claims

import (
	"context"
	"fmt"
	"time"
)

// ARQRecord is what scour read, at bind, in the Cyborg accelerator
// request (ARQ) of an instance holding a Cyborg device of the host, and
// whether the ARQ agreed with the host's Placement tree and hardware.
type ARQRecord struct {
	Host     string
	Instance string
	// DeviceRP is the provider of the host's tree the record is about:
	// the device Placement shows the instance holding.
	DeviceRP string
	ARQ      string
	// ARQDeviceRP, ARQHostname, AttachHandleType and Address are the
	// ARQ's device_rp_uuid, hostname, attach_handle_type and the PCI
	// address of its attach_handle_info.
	ARQDeviceRP      string
	ARQHostname      string
	AttachHandleType string
	Address          string
	Result           string // "agree" or "mismatch"
	Detail           string
	RecordedAt       time.Time
}

// RecordARQ stores r once: the first record of (host, instance, device)
// stands, so a replayed bind or a later scan does not overwrite what
// was read while the ARQ existed.
func (s *Store) RecordARQ(ctx context.Context, r ARQRecord) error {
	_, err := s.exec(ctx, `INSERT INTO cyborg_arqs (host, instance_uuid, device_rp, arq_uuid, arq_device_rp, arq_hostname,
		attach_handle_type, address, result, detail, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (host, instance_uuid, device_rp) DO NOTHING`,
		r.Host, r.Instance, r.DeviceRP, r.ARQ, r.ARQDeviceRP, r.ARQHostname, r.AttachHandleType, r.Address, r.Result, r.Detail, s.stamp())
	if err != nil {
		return fmt.Errorf("claims: record the Cyborg ARQ %s of instance %s on device %s of host %s: %w", r.ARQ, r.Instance, r.DeviceRP, r.Host, err)
	}
	return nil
}

// ARQRecords returns the host's ARQ records of the instance ("" for
// every instance), oldest first.
func (s *Store) ARQRecords(ctx context.Context, host, instance string) ([]ARQRecord, error) {
	rows, err := s.r.QueryContext(ctx, s.d.rebind(`SELECT host, instance_uuid, device_rp, arq_uuid, arq_device_rp, arq_hostname,
		attach_handle_type, address, result, detail, recorded_at FROM cyborg_arqs
		WHERE host = ? AND (? = '' OR instance_uuid = ?) ORDER BY recorded_at, device_rp`), host, instance, instance)
	if err != nil {
		return nil, fmt.Errorf("claims: Cyborg ARQ records of instance %q on host %s: %w", instance, host, err)
	}
	defer rows.Close()
	var out []ARQRecord
	for rows.Next() {
		var r ARQRecord
		var at string
		if err := rows.Scan(&r.Host, &r.Instance, &r.DeviceRP, &r.ARQ, &r.ARQDeviceRP, &r.ARQHostname,
			&r.AttachHandleType, &r.Address, &r.Result, &r.Detail, &at); err != nil {
			return nil, fmt.Errorf("claims: Cyborg ARQ records on host %s: %w", host, err)
		}
		if r.RecordedAt, err = parseTS(at); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ARQRecorded says whether the host has a record of the instance's ARQ
// for the device.
func (s *Store) ARQRecorded(ctx context.Context, host, instance, deviceRP string) (bool, error) {
	var n int
	err := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*) FROM cyborg_arqs
		WHERE host = ? AND instance_uuid = ? AND device_rp = ?`), host, instance, deviceRP).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("claims: Cyborg ARQ record of instance %s on device %s of host %s: %w", instance, deviceRP, host, err)
	}
	return n > 0, nil
}
