package quality

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func served(models ...string) func(string) bool {
	return func(m string) bool {
		for _, x := range models {
			if x == m {
				return true
			}
		}
		return false
	}
}

func TestParseUpload(t *testing.T) {
	body := strings.Join([]string{
		`{"id":"a","prompt":"what is 2+2","scores":{"big":1,"small":0}}`,
		``,
		`{"id":"b","prompt":"write a poem","scores":{"big":0.5,"gpt-x":1},"output_tokens":{"big":120}}`,
		`not json`,
		`{"id":"c","prompt":"","scores":{"big":1}}`,
		`{"id":"d","prompt":"hi","scores":{}}`,
		`{"id":"e","prompt":"hi","scores":{"big":1.5}}`,
		`{"id":"f","prompt":"hi","scores":{"big":1},"output_tokens":{"big":0}}`,
		`{"id":"g","prompt":"hi","scores":{"gpt-x":1}}`,
		`{"id":"h","prompt":"hi","scores":{"big":"1"}}`,
		`{"id":"i","prompt":"hi","scores":{"big":1},"extra":1}`,
		`{"id":"j","prompt":"hi","scores":{"big":1}} {}`,
		`[1]`,
		"{\"id\":\"k\",\"prompt\":\"\xff\",\"scores\":{\"big\":1}}",
	}, "\n")
	p, err := ParseUpload(strings.NewReader(body), served("big", "small"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	wantErr := []LineError{
		{Line: 4, Message: "not a JSON object"},
		{Line: 5, Message: "prompt is missing or empty"},
		{Line: 6, Message: `scores is missing or empty (want {"model": score in [0,1]})`},
		{Line: 7, Message: `score of "big" is 1.5, want a number in [0,1]`},
		{Line: 8, Message: `output_tokens of "big" is 0, want a number > 0`},
		{Line: 10, Message: "scores has the wrong type (string)"},
		{Line: 11, Message: `invalid JSON: unknown field "extra"`},
		{Line: 12, Message: "invalid JSON: data after the object"},
		{Line: 13, Message: "not a JSON object"},
		{Line: 14, Message: "not valid UTF-8"},
	}
	if d := cmp.Diff(wantErr, p.Errors); d != "" {
		t.Errorf("errors (-want +got):\n%s", d)
	}
	if p.ErrorCount != len(wantErr) || p.Lines != 13 || p.Skipped != 1 || len(p.Records) != 2 {
		t.Errorf("errors %d, lines %d, skipped %d, records %d; want %d, 13, 1, 2", p.ErrorCount, p.Lines, p.Skipped, len(p.Records), len(wantErr))
	}
	if d := cmp.Diff(map[string]int{"gpt-x": 2}, p.Unknown); d != "" {
		t.Errorf("unknown (-want +got):\n%s", d)
	}
	if _, ok := p.Records[1].Scores["gpt-x"]; ok || p.Records[1].OutputTokens["big"] != 120 {
		t.Errorf("record b = %+v, want gpt-x dropped and big's length kept", p.Records[1])
	}
}

func TestParseUploadLimits(t *testing.T) {
	line := `{"id":"a","prompt":"what is 2+2","scores":{"big":1}}` + "\n"
	// lines returns n such lines with the ids a, b, c … (all of one length).
	lines := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteString(strings.Replace(line, `"a"`, fmt.Sprintf("%q", string(rune('a'+i))), 1))
		}
		return b.String()
	}
	if _, err := ParseUpload(strings.NewReader(lines(10)), nil, Limits{MaxBytes: int64(len(line)*10 - 1)}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized upload: err = %v, want ErrTooLarge", err)
	}
	if p, err := ParseUpload(strings.NewReader(lines(10)), nil, Limits{MaxBytes: int64(len(line) * 10)}); err != nil || len(p.Records) != 10 {
		t.Errorf("upload of exactly the limit: %d records, err %v; want 10, nil", len(p.Records), err)
	}
	long := `{"id":"a","prompt":"` + strings.Repeat("x", 200) + `","scores":{"big":1}}`
	if _, err := ParseUpload(strings.NewReader(line+long), nil, Limits{MaxLineBytes: 100}); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("long line: err = %v, want ErrTooLarge naming line 2", err)
	}
	if _, err := ParseUpload(strings.NewReader(lines(3)), nil, Limits{MaxRecords: 2}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too many records: err = %v, want ErrTooLarge", err)
	}
	many := strings.Repeat("x\n", 300)
	p, err := ParseUpload(strings.NewReader(many), nil, Limits{MaxErrors: 5})
	if err != nil || len(p.Errors) != 5 || p.ErrorCount != 300 {
		t.Errorf("300 bad lines: %d reported, %d counted, err %v; want 5, 300, nil", len(p.Errors), p.ErrorCount, err)
	}
	// No trailing newline, CRLF line ends.
	p, err = ParseUpload(strings.NewReader("{\"prompt\":\"a\",\"scores\":{\"m\":1}}\r\n{\"prompt\":\"b\",\"scores\":{\"m\":0}}"), nil, Limits{})
	if err != nil || len(p.Records) != 2 || p.ErrorCount != 0 {
		t.Errorf("CRLF, no final newline: %d records, %d errors, err %v; want 2, 0, nil", len(p.Records), p.ErrorCount, err)
	}
}

// TestParseUploadRefusesRepeatedIDs: two lines with one id are two labels
// of one prompt (a concatenated or re-exported file); each repeat is a
// bad line naming the line the id first came on, so the upload is
// refused with every repeat listed. Lines without an id never collide.
func TestParseUploadRefusesRepeatedIDs(t *testing.T) {
	body := `{"id":"a","prompt":"p1","scores":{"big":1}}
{"id":"b","prompt":"p2","scores":{"big":0}}
{"prompt":"p3","scores":{"big":1}}
{"prompt":"p4","scores":{"big":1}}
{"id":"a","prompt":"p1 again","scores":{"big":0}}
{"id":"c","prompt":"","scores":{"big":0}}
{"id":"c","prompt":"p5","scores":{"big":0}}
{"id":"b","prompt":"p2","scores":{"big":0}}
`
	p, err := ParseUpload(strings.NewReader(body), nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := []LineError{
		{Line: 5, Message: `id "a" repeats line 1 (ids must be unique)`},
		{Line: 6, Message: "prompt is missing or empty"},
		{Line: 8, Message: `id "b" repeats line 2 (ids must be unique)`},
	}
	if d := cmp.Diff(want, p.Errors); d != "" || p.ErrorCount != 3 || len(p.Records) != 5 {
		t.Errorf("errors (-want +got):\n%s\n%d errors, %d records; want 3, 5 (an invalid line's id is not taken)", d, p.ErrorCount, len(p.Records))
	}
}

// FuzzParseUpload checks that any upload either fails with ErrTooLarge or
// parses into valid records (prompt set, scores of known models in [0,1],
// positive lengths) with every bad line numbered within the input.
func FuzzParseUpload(f *testing.F) {
	f.Add("{\"id\":\"a\",\"prompt\":\"what is 2+2\",\"scores\":{\"big\":1,\"small\":0}}\n")
	f.Add("{\"prompt\":\"p\",\"scores\":{\"big\":0.5,\"x\":1},\"output_tokens\":{\"big\":12,\"x\":3},\"task\":\"t\"}\r\n\n[]\n")
	f.Add("{\"prompt\":\"p\",\"scores\":{\"big\":NaN}}\n{\"prompt\":\"p\",\"scores\":{\"big\":-0}}")
	f.Add("{\"prompt\":\"p\",\"scores\":{\"\":1}}\n{\"prompt\":\"p\",\"scores\":{\"big\":1e309}}")
	f.Add("{\"id\":\"a\",\"prompt\":\"p\",\"scores\":{\"big\":1}}\n{\"id\":\"a\",\"prompt\":\"q\",\"scores\":{\"small\":0}}\n{\"id\":\"\\u0061\",\"prompt\":\"r\",\"scores\":{\"big\":0}}")
	f.Fuzz(func(t *testing.T, body string) {
		p, err := ParseUpload(strings.NewReader(body), served("big", "small"), Limits{MaxBytes: 1 << 16, MaxLineBytes: 4096})
		if err != nil {
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("err = %v, want nil or ErrTooLarge", err)
			}
			return
		}
		lines := strings.Count(body, "\n") + 1
		for _, e := range p.Errors {
			if e.Line < 1 || e.Line > lines || e.Message == "" {
				t.Fatalf("line error %+v outside 1..%d or without a message", e, lines)
			}
		}
		if p.ErrorCount+len(p.Records)+p.Skipped != p.Lines {
			t.Fatalf("%d errors + %d records + %d skipped != %d lines", p.ErrorCount, len(p.Records), p.Skipped, p.Lines)
		}
		ids := map[string]bool{}
		for _, r := range p.Records {
			if r.ID != "" && ids[r.ID] {
				t.Fatalf("two records have the id %q", r.ID)
			}
			ids[r.ID] = true
			if strings.TrimSpace(r.Prompt) == "" || len(r.Scores) == 0 {
				t.Fatalf("record %+v has no prompt or no scores", r)
			}
			for m, q := range r.Scores {
				if (m != "big" && m != "small") || !(q >= 0 && q <= 1) {
					t.Fatalf("record %+v keeps score %q = %v", r, m, q)
				}
			}
			for m, n := range r.OutputTokens {
				if (m != "big" && m != "small") || !(n > 0) {
					t.Fatalf("record %+v keeps length %q = %v", r, m, n)
				}
			}
		}
	})
}
