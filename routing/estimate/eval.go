package estimate

import (
	"fmt"
	"math"
	"sort"
)

// EvalRow is one prompt of an evaluation: the true per-model quality labels
// and the predicted ones.
type EvalRow struct {
	Truth map[string]float64
	Pred  map[string]float64
}

// ModelScore is the agreement of one model's predictions with its labels:
// AUC over the rows whose label is exactly 0 or 1, and Pearson's r over all
// rows (graded labels included).
type ModelScore struct {
	Model   string
	AUC     float64
	NBinary int
	Pearson float64
	N       int
}

// Outcome is the mean true quality and mean unit price of a routing rule
// over the evaluated prompts.
type Outcome struct {
	Rule    string
	Quality float64
	// Price is the mean of the chosen model's price in USD per 1M tokens
	// (the mean of its input and output price); 0 when no prices are
	// known.
	Price float64
	// Model is the chosen model for single-model rules.
	Model string
}

// Price is a model's price in USD per 1M tokens.
type Price struct {
	In  float64 `json:"input_price"`
	Out float64 `json:"output_price"`
}

func (p Price) unit() float64 { return (p.In + p.Out) / 2 }

// Report is the result of Evaluate.
type Report struct {
	Models []ModelScore
	// MeanAUC is the mean of Models' AUCs (NaN ones skipped).
	MeanAUC float64
	BestSingle,
	Argmax,
	Oracle Outcome
	// Threshold holds the "cheapest model with q̂ ≥ t" rule for each t
	// (a prompt where no model reaches t gets the argmax).
	Threshold []Outcome
}

// Thresholds are the t of the threshold rules in Report.
var thresholds = []float64{0.3, 0.4, 0.5, 0.6, 0.7, 0.8}

// Evaluate scores predictions against labels over the models that carry
// a label and a prediction on every row (rows missing one are skipped for
// the routing outcome). prices may be nil; ties go to the cheaper model,
// then to the name that sorts first.
func Evaluate(rows []EvalRow, prices map[string]Price) Report {
	var rep Report
	// Models present in every row with both label and prediction.
	count := map[string]int{}
	for _, r := range rows {
		for m := range r.Truth {
			if _, ok := r.Pred[m]; ok {
				count[m]++
			}
		}
	}
	var models []string
	for m := range count {
		models = append(models, m)
	}
	sort.Slice(models, func(i, j int) bool {
		pi, pj := prices[models[i]].unit(), prices[models[j]].unit()
		if pi != pj {
			return pi < pj
		}
		return models[i] < models[j]
	})
	for _, m := range models {
		var t, p, bt, bp []float64
		for _, r := range rows {
			tv, ok1 := r.Truth[m]
			pv, ok2 := r.Pred[m]
			if !ok1 || !ok2 {
				continue
			}
			if tv == 0 || tv == 1 {
				bt, bp = append(bt, tv), append(bp, pv)
			}
			t, p = append(t, tv), append(p, pv)
		}
		rep.Models = append(rep.Models, ModelScore{Model: m, N: len(t), NBinary: len(bt),
			AUC: AUC(bp, bt), Pearson: Pearson(p, t)})
	}
	var sum float64
	var n int
	for _, s := range rep.Models {
		if !math.IsNaN(s.AUC) {
			sum += s.AUC
			n++
		}
	}
	rep.MeanAUC = math.NaN()
	if n > 0 {
		rep.MeanAUC = sum / float64(n)
	}

	// Routing outcomes over complete rows; models are sorted cheapest
	// first, so a strict ">" keeps the cheaper of equals.
	var full []EvalRow
	for _, r := range rows {
		ok := len(models) > 0
		for _, m := range models {
			_, a := r.Truth[m]
			_, b := r.Pred[m]
			ok = ok && a && b
		}
		if ok {
			full = append(full, r)
		}
	}
	if len(full) == 0 {
		return rep
	}
	nf := float64(len(full))
	// Best single model by mean true quality.
	best := -1.0
	for _, m := range models {
		var q float64
		for _, r := range full {
			q += r.Truth[m]
		}
		q /= nf
		if q > best {
			best = q
			rep.BestSingle = Outcome{Rule: "best_single", Quality: q, Price: prices[m].unit(), Model: m}
		}
	}
	argmax := func(v map[string]float64) string {
		bm, bv := "", math.Inf(-1)
		for _, m := range models {
			if v[m] > bv {
				bm, bv = m, v[m]
			}
		}
		return bm
	}
	rule := func(name string, pick func(EvalRow) string) Outcome {
		o := Outcome{Rule: name}
		for _, r := range full {
			m := pick(r)
			o.Quality += r.Truth[m]
			o.Price += prices[m].unit()
		}
		o.Quality /= nf
		o.Price /= nf
		return o
	}
	rep.Argmax = rule("argmax", func(r EvalRow) string { return argmax(r.Pred) })
	rep.Oracle = rule("oracle", func(r EvalRow) string { return argmax(r.Truth) })
	for _, t := range thresholds {
		rep.Threshold = append(rep.Threshold, rule(thresholdName(t), func(r EvalRow) string {
			for _, m := range models { // cheapest first
				if r.Pred[m] >= t {
					return m
				}
			}
			return argmax(r.Pred)
		}))
	}
	return rep
}

func thresholdName(t float64) string { return fmt.Sprintf("threshold_%.1f", t) }

// AUC is the area under the ROC curve of scores against 0/1 labels (the
// Mann–Whitney statistic with ties counted half); NaN when one class is
// missing.
func AUC(scores, labels []float64) float64 {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return scores[idx[a]] < scores[idx[b]] })
	// Average ranks over ties.
	ranks := make([]float64, len(scores))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && scores[idx[j+1]] == scores[idx[i]] {
			j++
		}
		r := float64(i+j)/2 + 1
		for k := i; k <= j; k++ {
			ranks[idx[k]] = r
		}
		i = j + 1
	}
	var pos, neg, sumPos float64
	for i, l := range labels {
		if l >= 0.5 {
			pos++
			sumPos += ranks[i]
		} else {
			neg++
		}
	}
	if pos == 0 || neg == 0 {
		return math.NaN()
	}
	return (sumPos - pos*(pos+1)/2) / (pos * neg)
}

// Pearson is the correlation coefficient of x and y; NaN when either is
// constant.
func Pearson(x, y []float64) float64 {
	n := float64(len(x))
	if n == 0 {
		return math.NaN()
	}
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx /= n
	my /= n
	var sxy, sxx, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return math.NaN()
	}
	return sxy / math.Sqrt(sxx*syy)
}
