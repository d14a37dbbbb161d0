package vllmemu

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// rubric writes the judge rubric as routing/quality does (its delimiters).
func rubric(prompt, answer string) string {
	return "Rate it.\n\n" + rubricRequestOpen + prompt + rubricAnswerOpen + answer + rubricAnswerClose + "Reply with the score only."
}

// TestJudgeInstance asks the judge-kind instance to score answers the
// cluster's models really gave: 5 for a label of 1, 1 for a label of 0,
// flipped at the configured rate; unknown prompts and answers are 400.
func TestJudgeInstance(t *testing.T) {
	prompts := []string{"what is the capital of France", "add 2 and 3", "name a prime above 10"}
	labels := LabelTable{
		prompts[0]: {"big": 1, "small": 0},
		prompts[1]: {"big": 0, "small": 1},
		prompts[2]: {"big": 1, "small": 1},
	}
	c := testCluster(t, func(cfg *Config) { cfg.Judges = map[int]*Judge{0: {Labels: labels, Flip: 0.1}} })
	judge, ctx := sdk(c.Instances[0]), context.Background()
	ask := func(msg string) (string, error) {
		r, err := judge.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "big",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are an impartial evaluator."), openai.UserMessage(msg)}})
		if err != nil {
			return "", err
		}
		return r.Choices[0].Message.Content, nil
	}
	// The answers the two models give.
	answers := map[string]map[string]string{}
	for i, in := range c.Instances {
		model := []string{"big", "small"}[i]
		for _, p := range prompts {
			cl := sdk(in)
			r, err := cl.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(p)}, MaxTokens: openai.Int(16)})
			if err != nil {
				t.Fatal(err)
			}
			if answers[p] == nil {
				answers[p] = map[string]string{}
			}
			answers[p][model] = r.Choices[0].Message.Content
		}
	}
	flips, n := 0, 0
	for round := 0; round < 40; round++ {
		for _, p := range prompts {
			for _, m := range []string{"big", "small"} {
				got, err := ask(rubric(p, answers[p][m]))
				if err != nil {
					t.Fatal(err)
				}
				want := map[float64]string{1: "Score: 5", 0: "Score: 1"}[labels[p][m]]
				n++
				switch {
				case got == want:
				case got == map[string]string{"Score: 5": "Score: 1", "Score: 1": "Score: 5"}[want]:
					flips++
				default:
					t.Fatalf("judge of %s on %q = %q, want %q or its flip", m, p, got, want)
				}
			}
		}
	}
	if rate := float64(flips) / float64(n); rate < 0.05 || rate > 0.16 {
		t.Errorf("flipped %d of %d judgments (%.3f), want about 0.1", flips, n, rate)
	}
	for _, bad := range []string{rubric("an unknown prompt", answers[prompts[0]]["big"]), rubric(prompts[0], "[emulated] some other text here")} {
		var apiErr *openai.Error
		if _, err := ask(bad); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.RawJSON(), "judge:") {
			t.Errorf("unjudgeable rubric: %v, want a 400 naming the judge", err)
		}
	}
	// The other instance is no judge: a rubric is an ordinary prompt.
	other := sdk(c.Instances[1])
	r, err := other.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "small",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(rubric(prompts[0], answers[prompts[0]]["big"]))}, MaxTokens: openai.Int(8)})
	if err != nil || !strings.HasPrefix(r.Choices[0].Message.Content, EmulatedMarker) {
		t.Errorf("rubric to a non-judge: %v %v", r, err)
	}
}
