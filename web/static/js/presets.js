// presets.js: the named presets' weights, mirroring routing.PresetWeights
// on the server (quality, latency and cost 0.8 on their objective, balanced
// a third each).

/** PRESET_WEIGHTS maps a preset name to its weight vector. */
export const PRESET_WEIGHTS = {
  quality: { quality: 0.8, latency: 0.1, cost: 0.1 },
  latency: { quality: 0.1, latency: 0.8, cost: 0.1 },
  cost: { quality: 0.1, latency: 0.1, cost: 0.8 },
  balanced: { quality: 1 / 3, latency: 1 / 3, cost: 1 / 3 },
};
