package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/dispatch"
	"github.com/routebalance/routebalance/routing/proxy"
	"github.com/routebalance/routebalance/routing/quality"
	"github.com/routebalance/routebalance/tenants/limits"
)

// judgeKeyID is the key id of judge calls in the usage ledger: a
// tenant's judge usage is its rows with this key (GET
// /api/v1/usage?group_by=key shows it as its own group).
const judgeKeyID = "judge"

// judgeCaller calls a cluster's judge model through the dispatcher —
// routed to an instance of that model in the tenant's cluster, under the
// tenant's spend guard, metered to the tenant under judgeKeyID — and never
// through the inference API, so a judge call is never offered to the judge.
type judgeCaller struct {
	d     *dispatch.Dispatcher
	clock routing.Clock
}

var _ quality.JudgeCaller = judgeCaller{}

// CallJudge sends the rubric as a non-streamed chat completion at
// temperature 0 and returns the reply's text and its cost at the
// instance's prices.
func (c judgeCaller) CallJudge(ctx context.Context, jc quality.JudgeCall) (quality.JudgeReply, error) {
	raw, err := json.Marshal(map[string]any{
		"model": jc.Model, "max_tokens": jc.MaxTokens, "temperature": 0,
		"messages": []map[string]string{{"role": "system", "content": jc.System}, {"role": "user", "content": jc.User}},
	})
	if err != nil {
		return quality.JudgeReply{}, err
	}
	body, err := proxy.NewBody(raw)
	if err != nil {
		return quality.JudgeReply{}, err
	}
	prompt := jc.System + "\n" + jc.User
	tokens := len(prompt)/4 + 1
	req := &routing.Request{ID: jc.RequestID, Prompt: prompt, PromptTokens: tokens, MaxTokens: jc.MaxTokens, Model: jc.Model,
		Weights: routing.Weights{Quality: 0, Cost: 0.5, Latency: 0.5}, Arrival: c.clock.Now(), Priority: routing.PriorityLow}
	cl := &judgeClient{}
	res, err := c.d.Dispatch(ctx, dispatch.Call{
		Request: req, Cluster: jc.Cluster, Spend: billing.Limits{TenantID: jc.TenantID, KeyID: judgeKeyID},
		Forward: proxy.Call{Endpoint: proxy.Chat, Body: body, PromptTokens: tokens, RequestID: jc.RequestID},
		Client:  cl,
	})
	var rep quality.JudgeReply
	if res.Decision != nil {
		in := res.Decision.Instance
		o := res.Relay.Outcome
		rep.CostUSD = (float64(o.PromptTokens)*in.PriceInPerMTok + float64(o.OutputTokens)*in.PriceOutPerMTok) / 1e6
	}
	if err != nil {
		return rep, fmt.Errorf("judge call: %w", err)
	}
	rep.Text, err = chatContent(cl.buf)
	return rep, err
}

// chatContent is the first choice's message content of a chat completion.
func chatContent(b []byte) (string, error) {
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return "", fmt.Errorf("judge reply is not a chat completion: %w", err)
	}
	if len(out.Choices) == 0 {
		return "", fmt.Errorf("judge reply has no choices")
	}
	return strings.TrimSpace(out.Choices[0].Message.Content), nil
}

// judgeClient buffers a judge call's answer (dispatch.Client).
type judgeClient struct{ buf []byte }

func (c *judgeClient) Limited(limits.Status)                       {}
func (c *judgeClient) Decided(*routing.Assignment)                 {}
func (c *judgeClient) FailedOver(string)                           {}
func (c *judgeClient) Begin(*routing.Assignment, int) proxy.Writer { return c }
func (c *judgeClient) Write(p []byte) (int, error)                 { c.buf = append(c.buf, p...); return len(p), nil }
func (c *judgeClient) Flush() error                                { return nil }
