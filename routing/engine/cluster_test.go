package engine

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReferenceCluster(t *testing.T) {
	f := ReferenceCluster()
	ins := f.Instances()
	if len(ins) != 13 {
		t.Fatalf("instances = %d, want 13", len(ins))
	}
	var ids []string
	for _, in := range ins[:3] {
		ids = append(ids, in.ID)
	}
	want := []string{"llama-3.1-nemotron-51b-instruct@a100-80g#0", "llama-3.1-nemotron-51b-instruct@a100-80g#1", "llama-3.3-nemotron-super-49b-v1@v100-32g#0"}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	if ins[12].Index != 12 || ins[12].Tier.Model != "gemma-2-9b-it" {
		t.Errorf("last instance = %+v", ins[12])
	}
	if got := f.OutputLengths.Median("gsm8k"); got != 150 {
		t.Errorf("median gsm8k = %v", got)
	}
	if got := f.OutputLengths.Median("no-such-task"); got != 250 {
		t.Errorf("median of unknown task = %v, want default 250", got)
	}
	tg, err := ParseTarget(f.CalibrationTargets.QualityOnlyMeanE2ES["lambda_6"])
	if err != nil || tg != (Target{Lo: 2, Hi: 4}) {
		t.Errorf("lambda_6 target = %+v, %v", tg, err)
	}
	tg, err = ParseTarget(f.CalibrationTargets.QualityOnlyMeanE2ES["lambda_30"])
	if err != nil || tg.Lo != 30 || !math.IsInf(tg.Hi, 1) {
		t.Errorf("lambda_30 target = %+v, %v", tg, err)
	}
	tg, err = ParseTarget(f.CalibrationTargets.BestPolicyCapacityReqS)
	if err != nil || tg != (Target{Lo: 25, Hi: 32}) {
		t.Errorf("capacity target = %+v, %v", tg, err)
	}
}

func TestParseClusterErrors(t *testing.T) {
	good := string(referenceJSON)
	tests := []struct {
		name, from, to, want string
	}{
		{"unknown field", `"verbosity": 1.2}`, `"verbosity": 1.2, "verbosty": 1}`, "unknown field"},
		{"max_num_seqs", `"max_num_seqs": 48`, `"max_num_seqs": 0`, "max_num_seqs must be >= 1"},
		{"load factor", `"tpot_load_factor": 2.5, "max_num_seqs": 48`, `"tpot_load_factor": 0.5, "max_num_seqs": 48`, "tpot_load_factor must be >= 1"},
		{"no default", `"default": 250`, `"other": 250`, `needs a "default" entry`},
		{"sigma", `"sigma": 0.6`, `"sigma": -1`, "sigma must be"},
		{"instances", `"instances": 2`, `"instances": 0`, "instances must be >= 1"},
	}
	for _, tt := range tests {
		if !strings.Contains(good, tt.from) {
			t.Fatalf("%s: %q not in the reference file", tt.name, tt.from)
		}
		_, err := ParseCluster([]byte(strings.Replace(good, tt.from, tt.to, 1)))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tt.name, err, tt.want)
		}
		if tt.name != "unknown field" && !errors.Is(err, ErrInvalidCluster) {
			t.Errorf("%s: err = %v is not ErrInvalidCluster", tt.name, err)
		}
	}
}
