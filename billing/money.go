package billing

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
)

// Nano is an amount of money in nano-USD (10⁻⁹ USD), the unit every cost,
// billed amount, spend total and budget is kept and summed in. Integers
// add exactly and cannot become NaN or ±Inf; floats appear only at the
// edges (JSON fields in USD, operator flags, the scheduler's predictions).
// The range is 0 … MaxNano (about 9.2 billion USD); sums saturate there
// instead of wrapping (see Add).
type Nano int64

// NanoPerUSD is the number of Nano in one US dollar.
const NanoPerUSD Nano = 1_000_000_000

// MaxNano is the largest amount: sums stop there.
const MaxNano Nano = math.MaxInt64

// MaxUSD is the largest dollar amount NanoFromUSD accepts: one amount
// (a request's cost, a budget) of at most 9 billion USD, so that at least
// one such amount fits below MaxNano.
const MaxUSD = 9e9

// ErrBadAmount means a money amount was NaN, ±Inf, negative or beyond
// MaxUSD (or a computation would have overflowed); such a value is
// refused, never stored.
var ErrBadAmount = errors.New("money amount must be finite, ≥ 0 and ≤ 9e9 USD")

// NanoFromUSD converts a dollar amount to Nano, rounding to the nearest
// nano-USD. It refuses NaN, ±Inf, negative values and values above MaxUSD
// with an error wrapping ErrBadAmount.
func NanoFromUSD(usd float64) (Nano, error) {
	if math.IsNaN(usd) || usd < 0 || usd > MaxUSD { // ±Inf fail the range test
		return 0, fmt.Errorf("%w: got %v", ErrBadAmount, usd)
	}
	return Nano(math.Round(usd * float64(NanoPerUSD))), nil
}

// USD returns n in dollars, for JSON fields and messages. The result is
// always finite.
func (n Nano) USD() float64 {
	whole, frac := n/NanoPerUSD, n%NanoPerUSD
	return float64(whole) + float64(frac)/float64(NanoPerUSD)
}

// String formats n as dollars with all nine decimals ("0.000000123").
func (n Nano) String() string {
	sign := ""
	u := uint64(n)
	if n < 0 {
		sign, u = "-", uint64(-n) //nolint:gosec // MinInt64 maps to itself as uint64, which is right
	}
	frac := strconv.FormatUint(u%uint64(NanoPerUSD), 10)
	for len(frac) < 9 {
		frac = "0" + frac
	}
	return sign + strconv.FormatUint(u/uint64(NanoPerUSD), 10) + "." + frac
}

// Add returns a + b, saturating at MaxNano (and at -MaxNano-1 below), so
// a run of huge amounts can never wrap to a negative spend.
func (a Nano) Add(b Nano) Nano {
	s := a + b
	switch {
	case b > 0 && s < a:
		return MaxNano
	case b < 0 && s > a:
		return math.MinInt64
	}
	return s
}

// mulDiv returns round(a × b / d) for a, b ≥ 0 and d > 0 with a 128-bit
// intermediate product; ok is false when the result exceeds MaxNano.
func mulDiv(a, b, d uint64) (Nano, bool) {
	hi, lo := bits.Mul64(a, b)
	if hi >= d {
		return 0, false
	}
	q, r := bits.Div64(hi, lo, d)
	if r >= d-r { // r ≥ d/2: round half up
		q++
	}
	if q > uint64(MaxNano) {
		return 0, false
	}
	return Nano(q), true
}

// nanoPerMTok converts a price in USD per million tokens to Nano per
// million tokens, refusing a bad price.
func nanoPerMTok(usdPerMTok float64) (Nano, error) {
	n, err := NanoFromUSD(usdPerMTok)
	if err != nil {
		return 0, fmt.Errorf("price per million tokens: %w", err)
	}
	return n, nil
}

// TokenCost returns what promptTokens and outputTokens cost at the given
// prices (USD per million tokens), computed in integers:
//
//	cost = round((promptTokens × in + outputTokens × out) / 10⁶)   (prices in Nano)
//
// A non-finite, negative or too large price, or a product beyond MaxNano,
// is refused with an error wrapping ErrBadAmount. Negative token counts
// count as 0.
func TokenCost(promptTokens, outputTokens int, priceInPerMTok, priceOutPerMTok float64) (Nano, error) {
	in, err := nanoPerMTok(priceInPerMTok)
	if err != nil {
		return 0, err
	}
	out, err := nanoPerMTok(priceOutPerMTok)
	if err != nil {
		return 0, err
	}
	// Sum the two products exactly in 128 bits, then divide once.
	h1, l1 := bits.Mul64(uint64(max(promptTokens, 0)), uint64(in))
	h2, l2 := bits.Mul64(uint64(max(outputTokens, 0)), uint64(out))
	lo, carry := bits.Add64(l1, l2, 0)
	hi, over := bits.Add64(h1, h2, carry)
	const mtok = 1_000_000
	if over != 0 || hi >= mtok {
		return 0, fmt.Errorf("%w: token cost overflows", ErrBadAmount)
	}
	q, r := bits.Div64(hi, lo, mtok)
	if r >= mtok-r {
		q++
	}
	if q > uint64(MaxNano) {
		return 0, fmt.Errorf("%w: token cost overflows", ErrBadAmount)
	}
	return Nano(q), nil
}

// MeterUnit converts the operator's meter unit (USD per unit of a Stripe
// meter value, e.g. 0.000001) to Nano; it must be at least one nano-USD.
func MeterUnit(unitUSD float64) (Nano, error) {
	u, err := NanoFromUSD(unitUSD)
	if err != nil || u < 1 {
		return 0, fmt.Errorf("%w: meter unit must be ≥ 1e-9 USD, got %v", ErrBadAmount, unitUSD)
	}
	return u, nil
}

// Units returns n in units of unit (> 0), rounded half up: the integer a
// Stripe meter event carries. Negative n counts 0.
func (n Nano) Units(unit Nano) int64 {
	if n <= 0 || unit <= 0 {
		return 0
	}
	return int64(n/unit) + int64(boolInt(n%unit >= unit-n%unit))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
