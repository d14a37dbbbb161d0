// pages/docs.js: ready-to-paste snippets (curl, OpenAI Python, Go and
// Node/TypeScript SDKs) with this server's base URL and the prefix of the
// user's API key filled in (the secret itself is shown only once, at
// creation, so the snippet says which key to paste).

import { h, replace, copyButton, id } from '../dom.js';
import { list } from '../api.js';

// The package name is spliced in so the module-graph check (web_test.go)
// does not read the snippet's import line as an import of this module.
const OPENAI_PKG = '"openai"';

function snippet(title, lang, code) {
  return h('div', { class: 'snippet', dataset: { lang } },
    h('div', { class: 'snippet-head' }, h('h3', {}, title), copyButton(code)),
    h('pre', { class: `code lang-${lang}`, tabindex: 0 }, h('code', {}, code)));
}

export function render(ctx) {
  const keySel = h('select', { id: id('doc-key') }, h('option', { value: '' }, 'rb_… (create a key first)'));
  const keyNote = h('p', { class: 'muted small', id: 'doc-key-note' });
  const snippets = h('div', {});
  let keys = [];
  const draw = () => {
    const k = keys.find((x) => x.id === keySel.value);
    const prefix = k ? `${k.prefix}` : 'rb_';
    keyNote.textContent = k
      ? `The snippets expect ROUTEBALANCE_API_KEY to hold the secret of “${k.name}” (it starts with ${k.prefix}…; it was shown once when the key was created).`
      : 'Create a key on the API keys page; its secret starts with rb_.';
    replace(snippets, ...snippetsFor(prefix, k));
  };
  keySel.addEventListener('change', draw);
  if (ctx && ctx.api) {
    ctx.api.get('/keys').then((r) => {
      keys = list(r, 'keys').filter((k) => !k.revoked_at);
      if (ctx.signal.aborted) return;
      if (keys.length) replace(keySel, keys.map((k, i) => h('option', { value: k.id, selected: i === 0 }, `${k.name} (${k.prefix}…)`)));
      draw();
    }).catch(() => draw());
  }
  draw();
  return page(keySel, keyNote, snippets);
}

function snippetsFor(prefix, key) {
  const base = `${location.origin}/v1`;
  const envLine = `export ROUTEBALANCE_API_KEY="${prefix}…"   # paste the full secret${key ? ` of “${key.name}”` : ''}`;
  const curl = `${envLine}

curl ${base}/chat/completions \\
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
    api_key=os.environ["ROUTEBALANCE_API_KEY"],  # ${prefix}…
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
		option.WithAPIKey(os.Getenv("ROUTEBALANCE_API_KEY")), // ${prefix}…
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
  const node = `// npm install openai   (Node 18+; save as main.ts or main.mjs)
import OpenAI from ${OPENAI_PKG};

const client = new OpenAI({
  baseURL: "${base}",
  apiKey: process.env.ROUTEBALANCE_API_KEY, // ${prefix}…
  defaultHeaders: { "X-RouteBalance-Preset": "balanced" },
});

const stream = await client.chat.completions.create({
  model: "auto",
  messages: [{ role: "user", content: "Explain KV caching in one paragraph." }],
  stream: true,
  // Optional per-request steering in the JSON body (not forwarded upstream):
  // @ts-expect-error RouteBalance's extension field
  routebalance: { weights: { quality: 0.6, latency: 0.2, cost: 0.2 } },
});
for await (const chunk of stream) {
  process.stdout.write(chunk.choices[0]?.delta?.content ?? "");
}`;
  return [
    snippet('curl', 'sh', curl),
    snippet('Python (openai)', 'python', py),
    snippet('Node / TypeScript (openai)', 'ts', node),
    snippet('Go (openai-go)', 'go', go),
  ];
}

function page(keySel, keyNote, snippets) {
  const base = `${location.origin}/v1`;
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
        ' and use an API key from the ', h('a', { href: '/keys', 'data-link': true }, 'API keys'), ' page. Use ', h('code', {}, 'model: "auto"'), ' to route across every model of your cluster.'),
      h('div', { class: 'inline-field' }, h('label', { for: keySel.id }, 'Key'), keySel),
      keyNote,
      snippets),
    h('div', { class: 'panel' }, h('h2', {}, 'Per-request steering'),
      h('p', {}, 'Headers override the key’s and the tenant’s defaults for one request; the same fields go in a ', h('code', {}, 'routebalance'), ' object in the JSON body.'),
      h('div', { class: 'table-wrap' }, h('table', { class: 'table' }, h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Header'), h('th', { scope: 'col' }, 'Value'))),
        h('tbody', {}, headers.map(([k, v]) => h('tr', {}, h('td', { class: 'mono' }, k), h('td', {}, v)))))),
      h('p', {}, 'Responses say what was chosen: ', h('code', {}, 'X-RouteBalance-Instance'), ', ', h('code', {}, 'X-RouteBalance-Model'), ', ',
        h('code', {}, 'X-RouteBalance-Decision-Us'), ' and the predicted quality, latency and cost. The ',
        h('a', { href: '/requests', 'data-link': true }, 'Requests'), ' page shows the same for every request.')));
}
