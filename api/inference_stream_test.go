package api

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/tenants"
)

// Concurrent long streams, in rounds so the relays' pooled line readers
// and the access log's pooled writers are reused across streams: every
// client (the OpenAI SDK) gets its own tokens whole and in order, and
// every stream is metered exactly once with its token count. Each stream
// (~60 KB of events) is longer than one pooled 32 KiB buffer.
func TestConcurrentStreamsInOrderMeteredOnce(t *testing.T) {
	const tokens, streams, rounds = 400, 6, 3
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: tokens})
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	words := make([]string, tokens)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i)
	}
	want := strings.Join(words, " ")
	c := e.client()
	for r := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, streams)
		for s := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				params := openai.ChatCompletionNewParams{Model: "auto", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
				params.StreamOptions.IncludeUsage = openai.Bool(s%2 == 0) // half ask for the usage chunk
				text, err := streamText(c.Chat.Completions.NewStreaming(context.Background(), params))
				if err != nil {
					errs <- fmt.Errorf("round %d stream %d: %w", r, s, err)
					return
				}
				if text != want {
					errs <- fmt.Errorf("round %d stream %d: got %d bytes of text, not the %d tokens in order", r, s, len(text), tokens)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	e.router.Settled(t)
	// A stream is metered after its end reached the client: wait for all.
	testwait.Until(t, "every stream metered", func() bool { return len(e.meter.events()) >= streams*rounds })
	evs := e.meter.events()
	if len(evs) != streams*rounds {
		t.Fatalf("%d usage events for %d streams", len(evs), streams*rounds)
	}
	seen := map[string]bool{}
	for _, ev := range evs {
		if seen[ev.RequestID] {
			t.Errorf("request %s metered twice", ev.RequestID)
		}
		seen[ev.RequestID] = true
		if ev.OutputTokens != tokens || ev.Status != "ok" {
			t.Errorf("event %s: %d output tokens, status %q; want %d, ok", ev.RequestID, ev.OutputTokens, ev.Status, tokens)
		}
	}
}

// streamText reads an SDK chat stream to its end and returns the content
// of its deltas, in order, and the stream's error; the stream is closed.
func streamText(st *ssestream.Stream[openai.ChatCompletionChunk]) (string, error) {
	defer st.Close()
	var text strings.Builder
	for st.Next() {
		if ch := st.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	return text.String(), st.Err()
}
