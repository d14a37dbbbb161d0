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
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runDemo(ctx, []string{"--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--time-scale", "0.02"}, &out, &errOut)
	}()
	keyRe := regexp.MustCompile(`API key:\s+(\S+)`)
	urlRe := regexp.MustCompile(`Dashboard:\s+(http://\S+)/`)
	deadline := time.Now().Add(60 * time.Second)
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
	key := keyRe.FindStringSubmatch(out.String())
	base := urlRe.FindStringSubmatch(out.String())
	if key == nil || base == nil {
		t.Fatalf("no key or URL in:\n%s", out.String())
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
