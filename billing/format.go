package billing

import (
	"math"
	"strconv"
	"strings"
)

// FormatUSD prints a dollar amount for people: two decimals from $1 up,
// three significant digits below (at least two decimals), so a small
// budget reads "$0.0012", never "$0.00".
func FormatUSD(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "$" + strconv.FormatFloat(v, 'f', -1, 64)
	}
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	if v == 0 || v >= 1 {
		return sign + "$" + strconv.FormatFloat(v, 'f', 2, 64)
	}
	dec := 2 - int(math.Floor(math.Log10(v)))
	s := strconv.FormatFloat(v, 'f', dec, 64)
	if i := strings.IndexByte(s, '.'); i >= 0 {
		min := i + 3 // keep two decimals
		for len(s) > min && s[len(s)-1] == '0' {
			s = s[:len(s)-1]
		}
	}
	return sign + "$" + s
}
