package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestDemoAnswersStreamThroughRouter runs `routebalance demo` in-process
// and sends the streamed request its printed curl command describes,
// through the router, with the official SDK.
func TestDemoAnswersStreamThroughRouter(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the service and 13 emulated instances")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	printed, done := startDemo(ctx, t, "0.02", 60*time.Second)
	key := regexp.MustCompile(`API key:\s+(\S+)`).FindStringSubmatch(printed)
	base := regexp.MustCompile(`Dashboard:\s+(http://\S+)/`).FindStringSubmatch(printed)
	if key == nil || base == nil {
		t.Fatalf("no key or URL in:\n%s", printed)
	}
	client := openai.NewClient(option.WithBaseURL(base[1]+"/v1"), option.WithAPIKey(key[1]), option.WithMaxRetries(0))
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         "auto",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("A train travels 120 km in 2 hours. How far does it travel in 5 hours?")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v\nservice log: see data dir", err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].Message.Content == "" || acc.Usage.CompletionTokens < 1 {
		t.Errorf("accumulated answer = %+v", acc.ChatCompletion)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("demo after Ctrl-C: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("demo did not stop after cancel")
	}
}

// startDemo runs `routebalance demo` in-process (until ctx ends) with the
// given --time-scale and waits, at most within, for it to print that it is
// up; it returns what the demo printed by then and the channel its exit
// error arrives on.
func startDemo(ctx context.Context, t *testing.T, timeScale string, within time.Duration) (string, <-chan error) {
	t.Helper()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runDemo(ctx, []string{"--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--time-scale", timeScale}, &out, &errOut)
	}()
	deadline := time.Now().Add(within)
	for !strings.Contains(out.String(), "Ctrl-C") {
		select {
		case err := <-done:
			t.Fatalf("demo exited: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo not up; stdout: %s stderr: %s", out.String(), errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return out.String(), done
}
