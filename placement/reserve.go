package placement

import "context"

// Reserve sets reserved=total on a device, allocated or not, so Nova
// cannot schedule it again and scour's next scan finds it dirty (an
// operator's `scourctl clean`). Raising reserved only ever keeps a device
// out of the pool; a device already reserved is left alone.
func (c *Client) Reserve(ctx context.Context, dev Ref) error {
	if err := checkRef(dev); err != nil {
		return devErr("reserve", dev, err)
	}
	return devErr("reserve", dev, c.reserveAll(ctx, dev))
}
