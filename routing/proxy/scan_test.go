package proxy

import (
	"encoding/json"
	"reflect"
	"testing"
)

// Answers as vLLM writes them: the scanner must read these in place (else
// the fuzz tests below compare the decoder with itself).
var (
	vllmChat = `{"id":"chatcmpl-9f2","object":"chat.completion","created":1733050000,"model":"qwen2.5-7b",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Paris is the capital of France.","tool_calls":[]},` +
		`"logprobs":null,"finish_reason":"stop","stop_reason":null}],` +
		`"usage":{"prompt_tokens":17,"total_tokens":25,"completion_tokens":8,"prompt_tokens_details":null},"prompt_logprobs":null}`
	vllmText     = `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" a b c","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}`
	vllmNoUsage  = `{"choices":[{"text":"one two three","message":{"content":"four five","reasoning_content":"six","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"stop"}]}`
	vllmChunk    = `{"id":"chatcmpl-9f2","object":"chat.completion.chunk","created":1733050000,"model":"qwen2.5-7b","choices":[{"index":0,"delta":{"content":" Paris"},"logprobs":null,"finish_reason":null}]}`
	vllmRole     = `{"id":"chatcmpl-9f2","object":"chat.completion.chunk","created":1733050000,"model":"qwen2.5-7b","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`
	vllmLast     = `{"id":"chatcmpl-9f2","object":"chat.completion.chunk","created":1733050000,"model":"qwen2.5-7b","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"length","stop_reason":null}]}`
	vllmUsage    = `{"id":"chatcmpl-9f2","object":"chat.completion.chunk","created":1733050000,"model":"qwen2.5-7b","choices":[],"usage":{"prompt_tokens":17,"total_tokens":33,"completion_tokens":16}}`
	vllmTextPart = `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":1,"text":" b","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}`
	vllmError    = `{"error":{"message":"boom","type":"InternalServerError","code":500}}`
	vllmTool     = `{"id":"c","object":"chat.completion.chunk","created":2,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]},"finish_reason":null}]}`
)

// Inputs the scanner must hand to the decoder or match it on: case
// variants, repeats, escapes, type errors, nulls, huge numbers.
var scanSeeds = []string{
	vllmChat, vllmText, vllmNoUsage, vllmChunk, vllmRole, vllmLast, vllmUsage, vllmTextPart, vllmError, vllmTool,
	`{"Usage":{"prompt_tokens":1,"completion_tokens":2}}`,
	`{"usage":{"Prompt_Tokens":1,"completion_tokens":2}}`,
	`{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`,
	`{"usage":{"prompt_tokens":1},"usage":null}`,
	`{"usage":{"prompt_tokens":1.5,"completion_tokens":2}}`,
	`{"usage":{"prompt_tokens":1e2,"completion_tokens":2}}`,
	`{"usage":{"prompt_tokens":99999999999999999999,"completion_tokens":2}}`,
	`{"usage":{"prompt_tokens":-9223372036854775808,"completion_tokens":9223372036854775807}}`,
	`{"usage":{"prompt_tokens":"1"}}`, `{"usage":7}`, `{"usage":null,"choices":null}`, `null`, `[]`, `"x"`, ``, `{`,
	`{"usag\u0065":{"prompt_tokens":1}}`, `{"ſage":1}`, `{"choices":[null]}`, `{"choices":{}}`, `{"choices":[1]}`,
	`{"choices":[{"finish_reason":"\u006cength","text":"\ud83d\ude00 x"}]}`,
	`{"choices":[{"finish_reason":5}]}`, `{"choices":[{"message":null,"text":null,"finish_reason":null}]}`,
	`{"choices":[{"message":{"content":1}}]}`, `{"choices":[{"message":{"tool_calls":null}}]}`,
	`{"choices":[{"message":{"tool_calls":  [ 1 , 2 ] }}]}`,
	`{"error":null,"choices":[{"index":0,"delta":{"content":"x"}}]}`,
	`{"error":"x","choices":[{"index":"0"}]}`, `{"created":1.0}`, `{"created":null,"id":null,"model":"\u00e9"}`,
	`{"choices":[{"index":0,"finish_reason":""}]}`, `{"choices":[{"index":0,"delta":null,"finish_reason":"stop"}]}`,
	`{"choices":[{"index":2147483648,"delta":{"reasoning":"r"}}]}`,
	`{"choices":[{"index":0},{"index":1},{"index":2},{"index":3},{"index":4},{"index":5},{"index":6},{"index":7},{"index":8,"text":"x"}]}`,
	"{\"choices\":[{\"text\":\"\xff\"}]}", `{"id":"a\"b","object":"o\\","model":"m\n"}`,
	` { "usage" : { "prompt_tokens" : 4 , "completion_tokens" : 5 } , "choices" : [ { "finish_reason" : "length" } ] } `,
}

// FuzzScanChat: countChat (the scanner, or the decoder when the scanner
// is not sure) gives exactly what the decoder gives, on any answer.
func FuzzScanChat(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, raw []byte, prompt int) {
		var got, want Result
		got.Outcome.PromptTokens, want.Outcome.PromptTokens = prompt, prompt
		countChat(raw, &got)
		countChatDecode(raw, &want)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("countChat(%q) = %+v, the decoder gives %+v", raw, got, want)
		}
	})
}

// FuzzScanChunk: whenever the scanner reads a streamed chunk, it reads
// what decoding it reads; a chunk the decoder refuses is never read.
func FuzzScanChunk(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, payload []byte, meta bool) {
		var got chunkView
		if !scanChunk(payload, meta, &got) {
			return
		}
		var c chunk
		if err := json.Unmarshal(payload, &c); err != nil {
			t.Fatalf("scanChunk(%q) read a chunk the decoder refuses: %v", payload, err)
		}
		var want chunkView
		want.fromChunk(&c)
		if !meta {
			want.id, want.object, want.model = "", "", ""
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("scanChunk(%q) = %+v, the decoder gives %+v", payload, got, want)
		}
	})
}

// TestScannersReadVLLMAnswersInPlace: vLLM's answers and chunks are read
// by the scanners (not handed to the decoder), with no allocation.
func TestScannersReadVLLMAnswersInPlace(t *testing.T) {
	for _, s := range []string{vllmChat, vllmText, vllmNoUsage} {
		var res Result
		if !scanChat([]byte(s), &res) {
			t.Errorf("scanChat left %s to the decoder", s)
		}
	}
	var res Result
	scanChat([]byte(vllmChat), &res)
	if !res.UsageReported || res.Outcome.PromptTokens != 17 || res.Outcome.OutputTokens != 8 || res.Outcome.Truncated {
		t.Errorf("scanChat(vllmChat) = %+v, want usage 17/8, not truncated", res)
	}
	for _, s := range []string{vllmChunk, vllmRole, vllmLast, vllmUsage, vllmTextPart, vllmError, vllmTool} {
		var v chunkView
		if !scanChunk([]byte(s), true, &v) {
			t.Errorf("scanChunk left %s to the decoder", s)
		}
	}
	var v chunkView
	scanChunk([]byte(vllmLast), false, &v)
	if v.n != 1 || !v.buf[0].finished || !v.buf[0].length || v.buf[0].content {
		t.Errorf("scanChunk(vllmLast) = %+v, want one finished choice cut for length, no content", v)
	}
	chat, chunkRaw := []byte(vllmChat), []byte(vllmChunk)
	if n := testing.AllocsPerRun(100, func() {
		var res Result
		scanChat(chat, &res)
		var v chunkView
		scanChunk(chunkRaw, false, &v)
	}); n != 0 && !raceOn {
		t.Errorf("scanning an answer and a chunk allocates %v times, want 0", n)
	}
}

// BenchmarkCountChat: the scanner against the decoder on vLLM's answer.
func BenchmarkCountChat(b *testing.B) {
	raw := []byte(vllmChat)
	for _, bc := range []struct {
		name string
		fn   func([]byte, *Result)
	}{{"decode", countChatDecode}, {"scan", countChat}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var res Result
				bc.fn(raw, &res)
			}
		})
	}
}

// BenchmarkChunk: reading a streamed chunk, scanner against decoder.
func BenchmarkChunk(b *testing.B) {
	raw := []byte(vllmChunk)
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c chunk
			_ = json.Unmarshal(raw, &c)
			var v chunkView
			v.fromChunk(&c)
		}
	})
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v chunkView
			scanChunk(raw, false, &v)
		}
	})
}
