// upstream.mjs: a tiny vLLM-like server for the browser tests, used only
// when `routebalance emulate` is not available in this build. It speaks
// enough of vLLM's OpenAI API for RouteBalance to register, probe, scrape
// and proxy to it: /health, /v1/models, /metrics, /v1/chat/completions and
// /v1/completions (JSON and SSE with stream_options.include_usage).

import http from 'node:http';

/** startUpstream listens on 127.0.0.1:0 and resolves to {url, model, close, requests}. */
export function startUpstream({ model = 'e2e-small', outputTokens = 8 } = {}) {
  const state = { running: 0, requests: 0 };
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    if (req.method === 'GET' && url.pathname === '/health') { res.writeHead(200); res.end(); return; }
    if (req.method === 'GET' && url.pathname === '/v1/models') {
      json(res, 200, { object: 'list', data: [{ id: model, object: 'model', created: 0, owned_by: 'vllm', max_model_len: 8192 }] });
      return;
    }
    if (req.method === 'GET' && url.pathname === '/metrics') {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
      res.end([
        `vllm:num_requests_running{model_name="${model}"} ${state.running}`,
        `vllm:num_requests_waiting{model_name="${model}"} 0`,
        `vllm:kv_cache_usage_perc{model_name="${model}"} 0.01`,
        '',
      ].join('\n'));
      return;
    }
    if (req.method === 'POST' && (url.pathname === '/v1/chat/completions' || url.pathname === '/v1/completions')) {
      let body = '';
      req.on('data', (c) => { body += c; });
      req.on('end', () => {
        let r;
        try { r = JSON.parse(body); } catch { json(res, 400, { error: { message: 'bad json' } }); return; }
        state.requests += 1;
        state.running += 1;
        const chat = url.pathname.endsWith('chat/completions');
        const n = Math.max(1, Math.min(outputTokens, r.max_tokens || outputTokens));
        const words = Array.from({ length: n }, (_, i) => `w${i}`);
        const prompt = chat ? JSON.stringify(r.messages || []).length / 4 : String(r.prompt || '').length / 4;
        const usage = { prompt_tokens: Math.max(1, Math.round(prompt)), completion_tokens: n, total_tokens: Math.round(prompt) + n };
        const id = `cmpl-${state.requests}`;
        const done = () => { state.running -= 1; };
        if (!r.stream) {
          const choice = chat
            ? { index: 0, message: { role: 'assistant', content: words.join(' ') }, finish_reason: 'length' }
            : { index: 0, text: words.join(' '), finish_reason: 'length' };
          json(res, 200, { id, object: chat ? 'chat.completion' : 'text_completion', created: 0, model: r.model, choices: [choice], usage });
          done();
          return;
        }
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        const obj = chat ? 'chat.completion.chunk' : 'text_completion';
        words.forEach((w, i) => {
          const choice = chat ? { index: 0, delta: i === 0 ? { role: 'assistant', content: w } : { content: ` ${w}` }, finish_reason: null }
            : { index: 0, text: i === 0 ? w : ` ${w}`, finish_reason: null };
          res.write(`data: ${JSON.stringify({ id, object: obj, created: 0, model: r.model, choices: [choice] })}\n\n`);
        });
        const last = chat ? { index: 0, delta: {}, finish_reason: 'length' } : { index: 0, text: '', finish_reason: 'length' };
        res.write(`data: ${JSON.stringify({ id, object: obj, created: 0, model: r.model, choices: [last] })}\n\n`);
        if (r.stream_options && r.stream_options.include_usage) {
          res.write(`data: ${JSON.stringify({ id, object: obj, created: 0, model: r.model, choices: [], usage })}\n\n`);
        }
        res.end('data: [DONE]\n\n');
        done();
      });
      return;
    }
    json(res, 404, { error: { message: `no route ${req.method} ${url.pathname}` } });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      resolve({
        url: `http://127.0.0.1:${port}`, model, gpu: 'L4', state,
        close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }),
      });
    });
  });
}

function json(res, status, v) {
  const b = JSON.stringify(v);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(b) });
  res.end(b);
}
