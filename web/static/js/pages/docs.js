// pages/docs.js: ready-to-paste snippets (curl, OpenAI Python and Go SDKs)
// with this server's base URL and a key placeholder.

import { h, copyButton } from '../dom.js';

function snippet(title, lang, code) {
  return h('div', { class: 'snippet' },
    h('div', { class: 'snippet-head' }, h('h3', {}, title), copyButton(code)),
    h('pre', { class: `code lang-${lang}`, tabindex: 0 }, h('code', {}, code)));
}

export function render() {
  const base = `${location.origin}/v1`;
  const curl = `curl ${base}/chat/completions \\
  -H "Authorization: Bearer $ROUTEBALANCE_API_KEY" \\
  -H "Content-Type: application/json" \\
  -H "X-RouteBalance-Preset: balanced" \\
  -d '{
    "model": "auto",
    "messages": [{"role": "user", "content": "Explain KV caching in one paragraph."}],
    "stream": true
  }'`;
  const py = `# pip install openai
import os
from openai import OpenAI

client = OpenAI(
    base_url="${base}",
    api_key=os.environ["ROUTEBALANCE_API_KEY"],  # rb_...
)

resp = client.chat.completions.create(
    model="auto",  # or a served model name to balance across its replicas
    messages=[{"role": "user", "content": "Explain KV caching in one paragraph."}],
    # Optional per-request steering, sent in the JSON body:
    extra_body={"routebalance": {"weights": {"quality": 0.6, "latency": 0.2, "cost": 0.2}}},
)
print(resp.choices[0].message.content)`;
  const go = `// go get github.com/openai/openai-go/v3
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func main() {
	client := openai.NewClient(
		option.WithBaseURL("${base}/"),
		option.WithAPIKey(os.Getenv("ROUTEBALANCE_API_KEY")),
		option.WithHeader("X-RouteBalance-Preset", "latency"),
	)
	resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "auto",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Explain KV caching in one paragraph.")},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Choices[0].Message.Content)
}`;
  const headers = [
    ['X-RouteBalance-Preset', 'quality | latency | cost | balanced'],
    ['X-RouteBalance-Weights', 'quality=0.6,cost=0.2,latency=0.2 (must sum to 1)'],
    ['X-RouteBalance-Priority', 'high | normal | low'],
    ['X-RouteBalance-Workflow', 'an id shared by the stages of one workflow (sticky routing)'],
    ['X-RouteBalance-Budget-USD', 'per-request spend cap; clamps max_tokens'],
    ['X-RouteBalance-TTFT-SLO-Ms / -TPOT-SLO-Ms', 'per-request latency budgets'],
  ];
  return h('section', { class: 'page' },
    h('div', { class: 'page-head' }, h('h1', {}, 'Docs')),
    h('div', { class: 'panel' },
      h('p', {}, 'RouteBalance speaks the OpenAI API. Point any OpenAI client at ', h('code', { id: 'base-url' }, base),
        ' and use an API key from the ', h('a', { href: '/keys', 'data-link': true }, 'API keys'), ' page (replace ',
        h('code', {}, '$ROUTEBALANCE_API_KEY'), '). Use ', h('code', {}, 'model: "auto"'), ' to route across every model of your cluster.'),
      snippet('curl', 'sh', curl),
      snippet('Python (openai)', 'python', py),
      snippet('Go (openai-go)', 'go', go)),
    h('div', { class: 'panel' }, h('h2', {}, 'Per-request steering'),
      h('p', {}, 'Headers override the key’s and the tenant’s defaults for one request; the same fields go in a ', h('code', {}, 'routebalance'), ' object in the JSON body.'),
      h('div', { class: 'table-wrap' }, h('table', { class: 'table' }, h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Header'), h('th', { scope: 'col' }, 'Value'))),
        h('tbody', {}, headers.map(([k, v]) => h('tr', {}, h('td', { class: 'mono' }, k), h('td', {}, v)))))),
      h('p', {}, 'Responses say what was chosen: ', h('code', {}, 'X-RouteBalance-Instance'), ', ', h('code', {}, 'X-RouteBalance-Model'), ', ',
        h('code', {}, 'X-RouteBalance-Decision-Us'), ' and the predicted quality, latency and cost.')));
}
