package quality

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/routebalance/routebalance/routing/estimate"
)

// ErrTooLarge is returned by ParseUpload when the upload exceeds
// Limits.MaxBytes, and wrapped when a line exceeds Limits.MaxLineBytes.
var ErrTooLarge = errors.New("quality: upload too large")

// Limits bound what one upload may hold.
type Limits struct {
	// MaxBytes is the largest upload read (default 8 MiB).
	MaxBytes int64
	// MaxLineBytes is the longest line (default 1 MiB).
	MaxLineBytes int
	// MaxRecords is the most records kept (default 100,000).
	MaxRecords int
	// MaxErrors is the most line errors reported (default 100); parsing
	// goes on and LineErrors counts every bad line.
	MaxErrors int
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = 8 << 20
	}
	if l.MaxLineBytes <= 0 {
		l.MaxLineBytes = 1 << 20
	}
	if l.MaxRecords <= 0 {
		l.MaxRecords = 100_000
	}
	if l.MaxErrors <= 0 {
		l.MaxErrors = 100
	}
	return l
}

// LineError is one rejected line of an upload; Line counts from 1.
type LineError struct {
	Line    int    `json:"line"`
	Message string `json:"message"`
}

// Parsed is the outcome of reading an upload.
type Parsed struct {
	// Records are the valid lines, with the scores and lengths of unknown
	// models removed.
	Records []estimate.Record
	// Lines is the number of non-blank lines read.
	Lines int
	// Errors lists the first Limits.MaxErrors bad lines; ErrorCount counts
	// them all.
	Errors     []LineError
	ErrorCount int
	// Unknown counts, per model name not served by the cluster, the lines
	// that scored it; those scores are not used.
	Unknown map[string]int
	// Skipped counts the valid lines that had only unknown models' scores.
	Skipped int
}

// ParseUpload reads JSON lines in the format of `routebalance index build
// --data` ({"id","prompt","scores":{model: q},"output_tokens"?,"task"?})
// from r, one line at a time (the upload is never decoded as one
// document). known reports whether a model is served by the cluster.
// A line is rejected, with its number, when it is not one JSON object of
// that shape, has an empty prompt, no scores, a score outside [0,1], a
// non-positive or non-finite output_tokens, is not valid UTF-8, or
// repeats the id of an earlier valid line (lines without an id are never
// duplicates; a repeated id would be two labels of one prompt, so the
// upload is refused rather than deduplicated by a rule nobody asked for).
// The error is non-nil only for ErrTooLarge and read errors; bad lines are
// reported in Parsed.Errors.
func ParseUpload(r io.Reader, known func(model string) bool, lim Limits) (Parsed, error) {
	lim = lim.withDefaults()
	lr := &io.LimitedReader{R: r, N: lim.MaxBytes + 1}
	br := bufio.NewReaderSize(lr, 64<<10)
	out := Parsed{Unknown: map[string]int{}}
	seen := map[string]int{} // id → the line it first came on
	var line []byte
	for n := 1; ; n++ {
		var err error
		line, err = readLine(br, line[:0], lim.MaxLineBytes)
		if lr.N <= 0 {
			return out, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, lim.MaxBytes)
		}
		if errors.Is(err, ErrTooLarge) {
			return out, fmt.Errorf("line %d: %w", n, err)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return out, fmt.Errorf("quality: read upload: %w", err)
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			out.Lines++
			rec, msg := parseLine(t)
			if first, dup := seen[rec.ID]; msg == "" && dup {
				msg = fmt.Sprintf("id %q repeats line %d (ids must be unique)", rec.ID, first)
			} else if msg == "" && rec.ID != "" {
				seen[rec.ID] = n
			}
			if msg != "" {
				out.ErrorCount++
				if len(out.Errors) < lim.MaxErrors {
					out.Errors = append(out.Errors, LineError{Line: n, Message: msg})
				}
			} else if keepKnown(&rec, known, out.Unknown) {
				if len(out.Records) >= lim.MaxRecords {
					return out, fmt.Errorf("%w: more than %d records", ErrTooLarge, lim.MaxRecords)
				}
				out.Records = append(out.Records, rec)
			} else {
				out.Skipped++
			}
		}
		if err != nil {
			return out, nil
		}
	}
}

// readLine appends the next line (without its newline) to dst; a line
// longer than max is ErrTooLarge. io.EOF comes with the last line.
func readLine(br *bufio.Reader, dst []byte, max int) ([]byte, error) {
	for {
		chunk, err := br.ReadSlice('\n')
		dst = append(dst, chunk...)
		body := len(dst)
		if body > 0 && dst[body-1] == '\n' {
			body--
		}
		if body > max {
			return dst, fmt.Errorf("%w: a line is longer than %d bytes", ErrTooLarge, max)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return dst[:body], err
	}
}

// parseLine decodes one non-blank line; msg is empty when it is valid.
func parseLine(b []byte) (estimate.Record, string) {
	var rec estimate.Record
	if !utf8.Valid(b) {
		return rec, "not valid UTF-8"
	}
	if b[0] != '{' {
		return rec, "not a JSON object"
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return rec, fmt.Sprintf("%s has the wrong type (%s)", te.Field, te.Value)
		}
		return rec, "invalid JSON: " + strings.TrimPrefix(err.Error(), "json: ")
	}
	if dec.More() {
		return rec, "invalid JSON: data after the object"
	}
	switch {
	case strings.TrimSpace(rec.Prompt) == "":
		return rec, "prompt is missing or empty"
	case len(rec.Scores) == 0:
		return rec, "scores is missing or empty (want {\"model\": score in [0,1]})"
	}
	for _, m := range sortedKeys(rec.Scores) {
		if m == "" {
			return rec, "scores has an empty model name"
		}
		if q := rec.Scores[m]; !(q >= 0 && q <= 1) {
			return rec, fmt.Sprintf("score of %q is %v, want a number in [0,1]", m, q)
		}
	}
	for _, m := range sortedKeys(rec.OutputTokens) {
		if n := rec.OutputTokens[m]; !(n > 0) || math.IsInf(n, 0) {
			return rec, fmt.Sprintf("output_tokens of %q is %v, want a number > 0", m, n)
		}
	}
	return rec, ""
}

// keepKnown drops the unknown models' labels from rec, counting them, and
// reports whether rec still scores a known model.
func keepKnown(rec *estimate.Record, known func(string) bool, unknown map[string]int) bool {
	if known == nil {
		return true
	}
	for m := range rec.Scores {
		if !known(m) {
			unknown[m]++
			delete(rec.Scores, m)
		}
	}
	for m := range rec.OutputTokens {
		if !known(m) {
			delete(rec.OutputTokens, m)
		}
	}
	return len(rec.Scores) > 0
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
