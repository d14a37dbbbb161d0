package tenants

import (
	"encoding/json"
	"strings"

	"github.com/routebalance/routebalance/routing"
)

// modelCard is the part of one /v1/models entry that can say what the
// model serves. OpenAI's and vLLM's cards do not (vLLM's ModelCard is id,
// object, created, owned_by, root, parent, max_model_len, permission);
// some servers do: Infinity lists "capabilities": ["embed"], LM Studio a
// "type" of "llm", "vlm" or "embeddings".
type modelCard struct {
	ID           string   `json:"id"`
	Capabilities []string `json:"capabilities"`
	Type         string   `json:"type"`
}

// kind is what the card says the model serves, and whether it says.
func (c modelCard) kind() (routing.Kind, bool) {
	embed, chat := false, false
	note := func(s string) {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "embed", "embedding", "embeddings", "text-embedding":
			embed = true
		case "chat", "generate", "completion", "completions", "text-generation", "llm", "vlm":
			chat = true
		}
	}
	for _, cp := range c.Capabilities {
		note(cp)
	}
	note(c.Type)
	switch {
	case embed && !chat:
		return routing.KindEmbedding, true
	case chat && !embed:
		return routing.KindChat, true
	}
	return "", false // silent, or both (a server that serves both for one model)
}

// modelKinds reads the kinds the model list's entries state, and the
// one kind they all state (empty when one is silent or they differ).
func modelKinds(list []json.RawMessage) (map[string]routing.Kind, routing.Kind) {
	kinds := map[string]routing.Kind{}
	var all routing.Kind
	agree := len(list) > 0
	for i, raw := range list {
		var c modelCard
		k, ok := routing.Kind(""), false
		if json.Unmarshal(raw, &c) == nil && c.ID != "" {
			k, ok = c.kind()
		}
		if ok {
			kinds[c.ID] = k
		}
		switch {
		case !ok:
			agree = false
		case i == 0:
			all = k
		case k != all:
			agree = false
		}
	}
	if !agree {
		return kinds, ""
	}
	return kinds, all
}
