package hardware

import "strings"

// CompareVersions compares two versions component by component, splitting
// on "." : components made only of digits compare numerically (any
// length, leading zeros ignored), others compare as strings; a missing
// component counts as "0", so "22.31" == "22.31.0" < "22.31.1014".
// It returns -1, 0 or +1.
func CompareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	n := max(len(as), len(bs))
	for i := range n {
		x, y := "0", "0"
		if i < len(as) {
			x = as[i]
		}
		if i < len(bs) {
			y = bs[i]
		}
		if c := compareComponent(x, y); c != 0 {
			return c
		}
	}
	return 0
}

func compareComponent(x, y string) int {
	if isDigits(x) && isDigits(y) {
		x, y = strings.TrimLeft(x, "0"), strings.TrimLeft(y, "0")
		if len(x) != len(y) {
			if len(x) < len(y) {
				return -1
			}
			return 1
		}
	}
	return strings.Compare(x, y)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// compareOrdered compares a and b on scale when one is given (both must be
// on it), else as versions. ok is false when a value is not on the scale.
func compareOrdered(scale []string, a, b string) (c int, ok bool) {
	if scale == nil {
		return CompareVersions(a, b), true
	}
	ia, ib := indexOf(scale, a), indexOf(scale, b)
	if ia < 0 || ib < 0 {
		return 0, false
	}
	switch {
	case ia < ib:
		return -1, true
	case ia > ib:
		return 1, true
	}
	return 0, true
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}
