package hardware

import (
	"fmt"
	"regexp"
	"strings"
)

var addrRE = regexp.MustCompile(`^(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$`)

// ParseAddress normalises a PCI address from Nova (upper case, in RP names),
// sysfs or nvme-cli (lower case) to the lower-case form with domain.
func ParseAddress(s string) (Address, error) {
	m := addrRE.FindStringSubmatch(strings.ToLower(strings.TrimSpace(s)))
	if m == nil {
		return "", fmt.Errorf("invalid PCI address %q: want DDDD:BB:SS.F", s)
	}
	dom := m[1]
	if dom == "" {
		dom = "0000"
	}
	return Address(fmt.Sprintf("%s:%s:%s.%s", dom, m[2], m[3], m[4])), nil
}

// Upper returns the address as Nova writes it in resource provider names.
func (a Address) Upper() string { return strings.ToUpper(string(a)) }
