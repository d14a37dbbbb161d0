// kind.js: which kind ("chat" or "embedding") to register an instance
// with, read from a Test connection report (tenants.ConnectionReport).
// Servers that state what a model serves (Infinity's capabilities, LM
// Studio's type) fill model_kinds; vLLM's /v1/models does not, so for a
// vLLM server this returns null and the form keeps what the user chose.

/** kindFor returns the stated kind of model in report r, else r.kind when
 *  the server stated one kind for all its models, else null. */
export function kindFor(r, model) {
  if (!r) return null;
  const k = r.model_kinds && model ? r.model_kinds[model] : undefined;
  if (k === 'chat' || k === 'embedding') return k;
  if (r.kind === 'chat' || r.kind === 'embedding') return r.kind;
  return null;
}
