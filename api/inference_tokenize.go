package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/internal/jsonscan"
	"github.com/routebalance/routebalance/routing/dispatch"
	"github.com/routebalance/routebalance/routing/proxy"
)

// parseTokenize validates the JSON body of vLLM's POST /tokenize (ep
// proxy.Tokenize) or POST /detokenize (proxy.Detokenize): model is a
// served model's name ("auto" is refused: token ids belong to one
// model's tokenizer); /tokenize takes exactly one of prompt (a string) or
// messages (a non-empty array of objects with a non-empty role), and
// /detokenize tokens (a non-empty array of integer token ids >= 0). Every
// other field (add_special_tokens, add_generation_prompt, …) is forwarded
// as written.
func parseTokenize(raw []byte, ep proxy.Endpoint) (*completionBody, error) {
	b, err := openBody(raw)
	if err != nil {
		return nil, err
	}
	fields := b.fields
	if b.model == "auto" {
		return nil, badParam("model", "name a served model: token ids belong to one model's tokenizer, so \"auto\" cannot be tokenized")
	}
	if ep == proxy.Detokenize {
		return b, tokenList(fields)
	}
	prompt, hasPrompt := present(fields, "prompt")
	msgs, hasMsgs := present(fields, "messages")
	switch {
	case hasPrompt && hasMsgs:
		return nil, badParam("prompt", "give either prompt or messages, not both")
	case hasPrompt:
		if jsonscan.KindOf(prompt) != jsonscan.String {
			return nil, badParam("prompt", "must be a string")
		}
	case hasMsgs:
		if jsonscan.KindOf(msgs) != jsonscan.Array {
			return nil, badParam("messages", "must be an array of message objects")
		}
		all := jsonscan.Elements(msgs)
		for i := 0; ; i++ {
			m, ok := all.NextElement()
			if !ok {
				if i == 0 {
					return nil, badParam("messages", "must contain at least one message")
				}
				break
			}
			if jsonscan.KindOf(m) != jsonscan.Object {
				return nil, badParam(messageParam(i, ""), "must be an object")
			}
			if !nonEmptyString(object(m), "role") {
				return nil, badParam(messageParam(i, ".role"), "must be a non-empty string")
			}
		}
	default:
		return nil, badParam("prompt", "you must provide a prompt (a string) or messages (an array)")
	}
	return b, nil
}

// tokenList checks /detokenize's tokens: a non-empty array of integer
// token ids >= 0 (at most 2^31-1, as tokenizers' vocabularies go).
func tokenList(fields *proxy.Body) error {
	raw, ok := present(fields, "tokens")
	if !ok {
		return badParam("tokens", "you must provide a tokens parameter")
	}
	if jsonscan.KindOf(raw) != jsonscan.Array {
		return badParam("tokens", "must be an array of token ids (integers >= 0)")
	}
	all := jsonscan.Elements(raw)
	for i := 0; ; i++ {
		t, ok := all.NextElement()
		if !ok {
			if i == 0 {
				return badParam("tokens", "must not be an empty array")
			}
			return nil
		}
		if n, err := strconv.ParseInt(string(t), 10, 32); err != nil || n < 0 || t[0] == '-' { // -0 too
			return badParam("tokens["+strconv.Itoa(i)+"]", "must be a token id (an integer >= 0)")
		}
	}
}

// tokenizer serves vLLM's POST /tokenize and POST /detokenize (at the
// server root, as vLLM serves them): authenticated like /v1, passed to an
// enabled instance of the named model in the key's cluster
// (dispatch.Pass: instances in turn, the next one when an instance cannot
// be reached or answers 5xx/429), answered as the instance answered. It
// is not inference: nothing is routed, estimated or metered, and the rate
// limits count it as one request with no tokens.
func (h *inference) tokenizer(ep proxy.Endpoint) fiber.Handler {
	return func(c *fiber.Ctx) error {
		x := &exchange{h: h, c: c, id: exchangeID(c)}
		ctx, cancel := context.WithCancel(c.UserContext())
		defer cancel()
		p, err := h.authenticate(ctx, c)
		if p == nil {
			return err
		}
		x.p = p
		if enc := c.Get(fiber.HeaderContentEncoding); enc != "" && !strings.EqualFold(enc, "identity") {
			return sendError(c, http.StatusUnsupportedMediaType, typeInvalidRequest, "", "", "compressed request bodies are not accepted")
		}
		if x.body, err = parseTokenize(c.BodyRaw(), ep); err != nil {
			return sendParamError(c, err)
		}
		cl, ok := p.RoutingCluster()
		if !ok {
			return sendError(c, http.StatusBadRequest, typeInvalidRequest, "no_cluster", "", p.NoClusterReason())
		}
		x.cluster = cl
		if h.dispatch == nil {
			return sendError(c, http.StatusServiceUnavailable, typeUnavailable, "not_configured", "", "no router is configured on this server")
		}
		stopWatch := watchClient(c.Context().Conn(), h.cfg.ClientCheckInterval, cancel)
		res, err := h.dispatch.Pass(ctx, dispatch.PassCall{
			Cluster: cl, Model: x.body.model,
			Forward:  proxy.Call{Endpoint: ep, Body: x.body.fields, RequestID: x.id},
			TenantID: p.Tenant.ID, KeyID: p.Key.ID,
			TenantLimits: p.Settings.Limits.Limiter(), KeyLimits: p.Key.Limits.Limiter(),
			Client: x,
		})
		stopWatch()
		if res.Attempts > 0 {
			c.Set(hdrAttempts, strconv.Itoa(res.Attempts))
		}
		if err != nil {
			return h.sendFailure(ctx, x, err)
		}
		c.Set(hdrInstance, res.Instance.ID)
		c.Set(hdrModel, res.Instance.Model)
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Status(res.Status).Send(x.buf.b)
	}
}
