package fleet

import (
	"bytes"
	"strconv"
)

// scanMetrics reads the four vLLM families of a /metrics page into fs
// without building the page's metric families: a vLLM page is mostly
// histograms the scheduler never reads, and the scraper reads every
// instance's page four times a second (expfmt's parser cost ~1 ms and
// ~2,800 allocations per 11 KB page of the emulator).
//
// It reads, line by line:
//   - "# HELP name …" and "# TYPE name gauge|counter|untyped" of the four
//     names (checked, nothing more: as for the Prometheus parser, a family
//     is present only with a sample);
//   - samples `name value [timestamp]` and `name{label="value",…} value
//     [timestamp]` of the four names, single spaces between the parts,
//     label values with the format's escapes (\\ \" \n);
//   - and skips every other line that does not contain one of the four
//     names (other metrics cannot change the result).
//
// Anything else that mentions one of the names — another type, blanks
// where the format allows them but this scanner does not expect them,
// quoted (UTF-8) names, a value strconv would read differently from the
// Prometheus parser — returns false, and the caller parses the page with
// expfmt instead. So a page is read as the Prometheus parser reads it
// whenever that parser accepts the page (FuzzScanMetricsMatchesExpfmt); a
// page it refuses for a line of another metric is still read for the
// gauges (the scrape does not fail on a metric the scheduler never reads).
func scanMetrics(page []byte, fs *families) bool {
	for len(page) > 0 {
		line := page
		if i := bytes.IndexByte(page, '\n'); i >= 0 {
			line, page = page[:i], page[i+1:]
		} else {
			page = nil
		}
		if len(line) == 0 {
			continue
		}
		if !scanLine(line, fs) {
			return false
		}
	}
	return true
}

// vllmPrefix starts each of the four names.
var vllmPrefix = []byte("vllm:")

// scanLine reads one line (without its newline) into fs; false when the
// line mentions one of the four names in a form it does not read.
func scanLine(line []byte, fs *families) bool {
	if !bytes.Contains(line, vllmPrefix) {
		return true // no vLLM metric
	}
	if line[0] == '#' {
		return scanComment(line, fs)
	}
	end := bytes.IndexAny(line, "{ \t")
	if end <= 0 {
		return mentionsNone(line)
	}
	f := fs.of(string(line[:end]))
	if f == nil {
		if line[0] == ' ' || line[0] == '\t' || line[0] == '{' {
			return mentionsNone(line)
		}
		return true // a sample of another metric (a label value may say vllm:)
	}
	rest := line[end:]
	if rest[0] == '{' {
		n, ok := skipLabels(rest)
		if !ok {
			return false
		}
		rest = rest[n:]
	}
	if len(rest) < 2 || rest[0] != ' ' {
		return false
	}
	rest = rest[1:]
	val := rest
	if i := bytes.IndexByte(rest, ' '); i >= 0 {
		val, rest = rest[:i], rest[i+1:]
		if _, err := strconv.ParseInt(string(rest), 10, 64); err != nil {
			return false // not a plain timestamp
		}
	}
	if bytes.ContainsAny(val, "pP_\t") {
		return false // the Prometheus parser refuses hex floats and underscores
	}
	x, err := strconv.ParseFloat(string(val), 64)
	if err != nil {
		return false
	}
	f.present = true
	f.add(x)
	return true
}

// mentionsNone reports whether line names none of the four families.
func mentionsNone(line []byte) bool {
	for _, name := range [...]string{MetricRunning, MetricWaiting, MetricKVUsage, MetricKVUsageOld} {
		if bytes.Contains(line, []byte(name)) {
			return false
		}
	}
	return true
}

// scanComment reads a comment line that contains "vllm:".
func scanComment(line []byte, fs *families) bool {
	var help bool
	switch {
	case bytes.HasPrefix(line, []byte("# HELP ")):
		help = true
	case bytes.HasPrefix(line, []byte("# TYPE ")):
	default:
		return mentionsNone(line)
	}
	rest := line[len("# HELP "):]
	name := rest
	if i := bytes.IndexAny(rest, " \t"); i >= 0 {
		name, rest = rest[:i], rest[i:]
	} else {
		rest = nil
	}
	f := fs.of(string(name))
	if f == nil {
		return mentionsNone(name)
	}
	if help {
		return true
	}
	switch string(rest) {
	case " gauge", " counter", " untyped":
		return true
	}
	return false
}

// skipLabels returns the length of the label set `{k="v",…}` at the start
// of b, false when it is not one in the plain form scanLine reads.
func skipLabels(b []byte) (int, bool) {
	i := 1
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for i < len(b) {
		start := i
		for i < len(b) && (b[i] == '_' || 'a' <= b[i] && b[i] <= 'z' || 'A' <= b[i] && b[i] <= 'Z' || i > start && '0' <= b[i] && b[i] <= '9') {
			i++
		}
		if i == start || i+1 >= len(b) || b[i] != '=' || b[i+1] != '"' {
			return 0, false
		}
		i += 2
		for {
			if i >= len(b) {
				return 0, false
			}
			c := b[i]
			if c == '"' {
				break
			}
			if c == '\\' {
				if i+1 >= len(b) || (b[i+1] != '\\' && b[i+1] != '"' && b[i+1] != 'n') {
					return 0, false
				}
				i++
			}
			i++
		}
		i++ // the closing quote
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case '}':
			return i + 1, true
		case ',':
			i++
		default:
			return 0, false
		}
	}
	return 0, false
}
