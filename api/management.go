package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/tenants"
)

// mountManagement registers the JSON management API under /api/v1.
// signup, login and refresh are public; everything else needs an access
// token as "Authorization: Bearer <jwt>".
//
//	POST   /signup                         {email,password,name} → 201 {tenant_id,access_token,refresh_token,expires_in}
//	POST   /login                          {email,password} → 200 {access_token,refresh_token,expires_in}
//	POST   /refresh                        {refresh_token} → 200 a new pair; the old refresh token is retired (reuse revokes the login)
//	POST   /logout                         → 204 (this login's tokens stop working)
//	POST   /password                       {old_password,new_password} → 200 a new pair; every other session is revoked
//	POST   /sessions/revoke-all            → 204 (every session of the user; also DELETE /sessions)
//	POST   /keys                           {name,cluster_id?} → 201 {id,name,key,prefix,…}
//	GET    /keys                           → {object:list,data:[key…]}
//	PATCH  /keys/{id}                      {name?,cluster_id?,preset?,weights?,slo?,limits?} → key
//	DELETE /keys/{id}                      → 204
//	POST   /clusters                       {name,policy?} → 201 cluster
//	GET    /clusters                       → list
//	GET    /clusters/{id}                  → cluster with its instances
//	PATCH  /clusters/{id}                  {name?,policy?} → cluster
//	DELETE /clusters/{id}                  → 204
//	GET    /clusters/{id}/state            → live scheduler view
//	POST   /clusters/{id}/whatif           {weights,baseline_weights?,policy?,max_requests?} → predicted (and baseline) quality, latency, cost (whatif.go)
//	POST   /clusters/{id}/quality-data     JSON lines of labelled prompts → 202 (quality_data.go)
//	GET    /clusters/{id}/quality-data     → build status, labels per model, validation AUC
//	DELETE /clusters/{id}/quality-data     → 204
//	GET    /clusters/{id}/quality-judge    → judge settings and what it did (quality_judge.go)
//	PUT    /clusters/{id}/quality-judge    {enabled,model,sample_rate,monthly_budget_usd} → the same
//	POST   /clusters/{id}/instances        {base_url,model,…,api_key?} → 201 instance
//	GET    /clusters/{id}/instances        → list
//	POST   /clusters/{id}/instances/test-connection {base_url,api_key?} → report
//	GET    /clusters/{id}/instances/{iid}  → instance
//	PATCH  /clusters/{id}/instances/{iid}  {any instance field} → instance
//	DELETE /clusters/{id}/instances/{iid}  → 204
//	GET    /clusters/{id}/autopilot        → {cluster_id, running, controllers: [autopilot.Status]}
//	GET    /settings                       → settings
//	PUT    /settings                       {default_cluster_id?,preset,weights?,slo?,limits?} → settings (full replacement)
//	GET    /catalog                        → {gpus, models} suggestions for the instance form
//	PATCH  /settings                       any subset of those fields → settings (absent = unchanged)
func (s *Server) mountManagement(r fiber.Router) {
	r.Post("/signup", s.signup)
	r.Post("/login", s.login)
	r.Post("/refresh", s.refresh)
	s.mountSessions(r)

	// The session check is per route (not a group middleware) so unknown
	// paths stay 404 rather than 401.
	a := authed{r: r, auth: s.requireSession}
	a.Post("/keys", s.createKey)
	a.Get("/keys", s.listKeys)
	a.Patch("/keys/:id", s.updateKey)
	a.Delete("/keys/:id", s.revokeKey)

	a.Post("/clusters", s.createCluster)
	a.Get("/clusters", s.listClusters)
	a.Get("/clusters/:id", s.getCluster)
	a.Patch("/clusters/:id", s.updateCluster)
	a.Delete("/clusters/:id", s.deleteCluster)
	a.Get("/clusters/:id/state", s.clusterState)
	a.Post("/clusters/:id/whatif", s.whatif)
	a.Post("/clusters/:id/quality-data", s.uploadQualityData)
	a.Get("/clusters/:id/quality-data", s.qualityData)
	a.Delete("/clusters/:id/quality-data", s.deleteQualityData)
	a.Get("/clusters/:id/quality-judge", s.qualityJudge)
	a.Put("/clusters/:id/quality-judge", s.putQualityJudge)
	a.Get("/clusters/:id/autopilot", s.clusterAutopilot)

	a.Post("/clusters/:id/instances/test-connection", s.testConnection)
	a.Post("/clusters/:id/instances", s.createInstance)
	a.Get("/clusters/:id/instances", s.listInstances)
	a.Get("/clusters/:id/instances/:iid", s.getInstance)
	a.Patch("/clusters/:id/instances/:iid", s.updateInstance)
	a.Delete("/clusters/:id/instances/:iid", s.deleteInstance)

	a.Get("/settings", s.getSettings)
	a.Put("/settings", s.putSettings)
	a.Patch("/settings", s.patchSettings)
	a.Get("/catalog", s.catalog)
}

// authed registers routes behind the session check.
type authed struct {
	r    fiber.Router
	auth fiber.Handler
}

func (a authed) Get(p string, h fiber.Handler)    { a.r.Get(p, a.auth, h) }
func (a authed) Post(p string, h fiber.Handler)   { a.r.Post(p, a.auth, h) }
func (a authed) Put(p string, h fiber.Handler)    { a.r.Put(p, a.auth, h) }
func (a authed) Patch(p string, h fiber.Handler)  { a.r.Patch(p, a.auth, h) }
func (a authed) Delete(p string, h fiber.Handler) { a.r.Delete(p, a.auth, h) }

// decodeJSON reads the body as one JSON object into dst. Malformed JSON,
// a non-object, trailing data and wrong value types are 400 with a message
// that names the problem (and the field as param when known).
func decodeJSON(c *fiber.Ctx, dst any) error {
	body := bytes.TrimSpace(c.Body())
	if len(body) == 0 {
		return badRequest("", "request body must be a JSON object")
	}
	if body[0] != '{' {
		return badRequest("", "request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(dst); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			return badRequest(te.Field, "%s must be %s, got %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
		case errors.As(err, &se):
			return badRequest("", "malformed JSON at byte %d: %v", se.Offset, se)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badRequest("", "malformed JSON: unexpected end of input")
		}
		return badRequest("", "malformed JSON: %v", err)
	}
	if dec.More() {
		return badRequest("", "malformed JSON: data after the object")
	}
	return nil
}

func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"):
		return "an integer"
	case strings.HasPrefix(k, "float"):
		return "a number"
	case k == "string":
		return "a string"
	case k == "bool":
		return "a boolean"
	case k == "struct", k == "map", k == "ptr":
		return "an object"
	case k == "slice":
		return "an array"
	}
	return "of another type"
}

// requireSession checks the bearer access token and stores the tenant.
func (s *Server) requireSession(c *fiber.Ctx) error {
	auth := c.Get(fiber.HeaderAuthorization)
	scheme, token, ok := strings.Cut(auth, " ")
	if auth == "" {
		return unauthorized("missing bearer token: send Authorization: Bearer <access_token>")
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return unauthorized("malformed Authorization header: want Bearer <access_token>")
	}
	sess, err := s.deps.Tenants.Authenticate(c.UserContext(), strings.TrimSpace(token))
	if errors.Is(err, tenants.ErrUnauthorized) {
		return unauthorized("invalid or expired access token")
	}
	if err != nil {
		return err
	}
	c.Locals(localTenantID, sess.TenantID)
	c.Locals(localSession, sess)
	return c.Next()
}

func tenantOf(c *fiber.Ctx) string {
	id, _ := c.Locals(localTenantID).(string)
	return id
}

type tokenResponse struct {
	TenantID     string `json:"tenant_id,omitempty"`
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
}

func tokens(tenantID string, p tenants.TokenPair) tokenResponse {
	return tokenResponse{TenantID: tenantID, AccessToken: p.AccessToken, RefreshToken: p.RefreshToken, TokenType: "Bearer", ExpiresIn: int64(p.ExpiresIn.Seconds())}
}

func (s *Server) signup(c *fiber.Ctx) error {
	var in tenants.SignupInput
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	t, pair, err := s.deps.Tenants.Signup(c.UserContext(), in)
	if err != nil {
		return err
	}
	s.afterSignup(c.UserContext(), t.ID, t.Name, in.Email)
	return c.Status(http.StatusCreated).JSON(tokens(t.ID, pair))
}

func (s *Server) login(c *fiber.Ctx) error {
	var in struct {
		Email    string `json:"email"`
		Password string `json:"password"`
	}
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	pair, err := s.deps.Tenants.LoginFrom(c.UserContext(), in.Email, in.Password, c.IP())
	if errors.Is(err, tenants.ErrTooManyAttempts) {
		return tooManyAttempts(c, err)
	}
	if errors.Is(err, tenants.ErrUnauthorized) {
		return unauthorized("invalid email or password")
	}
	if err != nil {
		return err
	}
	return c.JSON(tokens("", pair))
}

func (s *Server) refresh(c *fiber.Ctx) error {
	var in struct {
		RefreshToken string `json:"refresh_token"`
	}
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.RefreshToken == "" {
		return badRequest("refresh_token", "refresh_token is required")
	}
	pair, err := s.deps.Tenants.Refresh(c.UserContext(), in.RefreshToken)
	if errors.Is(err, tenants.ErrUnauthorized) {
		return unauthorized("invalid or expired refresh token")
	}
	if err != nil {
		return err
	}
	return c.JSON(tokens("", pair))
}

// list is the envelope of every list response.
type list[T any] struct {
	Object string `json:"object"`
	Data   []T    `json:"data"`
}

func listOf[T any](items []T) list[T] {
	if items == nil {
		items = []T{}
	}
	return list[T]{Object: "list", Data: items}
}

type createdKey struct {
	tenants.Key
	Secret string `json:"key"`
}

func (s *Server) createKey(c *fiber.Ctx) error {
	var in tenants.KeyInput
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	k, secret, err := s.deps.Tenants.CreateKey(c.UserContext(), tenantOf(c), in)
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(createdKey{Key: k, Secret: secret})
}

func (s *Server) listKeys(c *fiber.Ctx) error {
	ks, err := s.deps.Tenants.Keys(c.UserContext(), tenantOf(c))
	if err != nil {
		return err
	}
	return c.JSON(listOf(ks))
}

func (s *Server) updateKey(c *fiber.Ctx) error {
	var p tenants.KeyPatch
	if err := decodeJSON(c, &p); err != nil {
		return err
	}
	k, err := s.deps.Tenants.UpdateKey(c.UserContext(), tenantOf(c), c.Params("id"), p)
	if err != nil {
		return err
	}
	return c.JSON(k)
}

func (s *Server) revokeKey(c *fiber.Ctx) error {
	if err := s.deps.Tenants.RevokeKey(c.UserContext(), tenantOf(c), c.Params("id")); err != nil {
		return err
	}
	return c.SendStatus(http.StatusNoContent)
}

func (s *Server) createCluster(c *fiber.Ctx) error {
	var in tenants.ClusterInput
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl, err := s.deps.Tenants.CreateCluster(c.UserContext(), tenantOf(c), in)
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(cl)
}

func (s *Server) listClusters(c *fiber.Ctx) error {
	cs, err := s.deps.Tenants.Clusters(c.UserContext(), tenantOf(c))
	if err != nil {
		return err
	}
	return c.JSON(listOf(cs))
}

type clusterWithInstances struct {
	tenants.Cluster
	Instances []tenants.Instance `json:"instances"`
}

func (s *Server) getCluster(c *fiber.Ctx) error {
	ctx, tid, id := c.UserContext(), tenantOf(c), c.Params("id")
	cl, err := s.deps.Tenants.Cluster(ctx, tid, id)
	if err != nil {
		return err
	}
	ins, err := s.deps.Tenants.Instances(ctx, tid, id)
	if err != nil {
		return err
	}
	return c.JSON(clusterWithInstances{Cluster: cl, Instances: ins})
}

func (s *Server) updateCluster(c *fiber.Ctx) error {
	var p tenants.ClusterPatch
	if err := decodeJSON(c, &p); err != nil {
		return err
	}
	cl, err := s.deps.Tenants.UpdateCluster(c.UserContext(), tenantOf(c), c.Params("id"), p)
	if err != nil {
		return err
	}
	return c.JSON(cl)
}

func (s *Server) deleteCluster(c *fiber.Ctx) error {
	if err := s.deps.Tenants.DeleteCluster(c.UserContext(), tenantOf(c), c.Params("id")); err != nil {
		return err
	}
	if s.deps.QualityData != nil {
		// The stored upload goes with the cluster (ON DELETE CASCADE);
		// this drops the in-memory index.
		_ = s.deps.QualityData.Delete(c.UserContext(), c.Params("id"))
	}
	return c.SendStatus(http.StatusNoContent)
}

// clusterState answers GET /clusters/{id}/state. With a scheduler wired
// (Deps.State) "live" is true and "state" is its per-instance view (health,
// in-flight, queue, pending tokens, TPOT̂, scrape staleness, estimate
// source). Without one, "live" is false, "state" is null and only the
// registered instances are returned: no live data is invented.
func (s *Server) clusterState(c *fiber.Ctx) error {
	ctx, tid, id := c.UserContext(), tenantOf(c), c.Params("id")
	if _, err := s.deps.Tenants.Cluster(ctx, tid, id); err != nil {
		return err
	}
	ins, err := s.deps.Tenants.Instances(ctx, tid, id)
	if err != nil {
		return err
	}
	var state any
	if s.deps.State != nil {
		state = s.deps.State(id)
	}
	return c.JSON(fiber.Map{"cluster_id": id, "live": state != nil, "state": state, "instances": ins})
}

func (s *Server) createInstance(c *fiber.Ctx) error {
	var in tenants.InstanceInput
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	inst, err := s.deps.Tenants.CreateInstance(c.UserContext(), tenantOf(c), c.Params("id"), in)
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(inst)
}

func (s *Server) listInstances(c *fiber.Ctx) error {
	ins, err := s.deps.Tenants.Instances(c.UserContext(), tenantOf(c), c.Params("id"))
	if err != nil {
		return err
	}
	return c.JSON(listOf(ins))
}

func (s *Server) getInstance(c *fiber.Ctx) error {
	in, err := s.deps.Tenants.Instance(c.UserContext(), tenantOf(c), c.Params("id"), c.Params("iid"))
	if err != nil {
		return err
	}
	return c.JSON(in)
}

func (s *Server) updateInstance(c *fiber.Ctx) error {
	var p tenants.InstanceInput
	if err := decodeJSON(c, &p); err != nil {
		return err
	}
	in, err := s.deps.Tenants.UpdateInstance(c.UserContext(), tenantOf(c), c.Params("id"), c.Params("iid"), p)
	if err != nil {
		return err
	}
	return c.JSON(in)
}

func (s *Server) deleteInstance(c *fiber.Ctx) error {
	if err := s.deps.Tenants.DeleteInstance(c.UserContext(), tenantOf(c), c.Params("id"), c.Params("iid")); err != nil {
		return err
	}
	return c.SendStatus(http.StatusNoContent)
}

func (s *Server) testConnection(c *fiber.Ctx) error {
	var in struct {
		BaseURL string `json:"base_url"`
		APIKey  string `json:"api_key"`
	}
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.BaseURL == "" {
		return badRequest("base_url", "base_url is required")
	}
	ctx := c.UserContext()
	if _, err := s.deps.Tenants.Cluster(ctx, tenantOf(c), c.Params("id")); err != nil {
		return err
	}
	rep, err := s.deps.Tenants.TestConnection(ctx, in.BaseURL, in.APIKey)
	if err != nil {
		return err
	}
	return c.JSON(rep)
}

func (s *Server) getSettings(c *fiber.Ctx) error {
	st, err := s.deps.Tenants.Settings(c.UserContext(), tenantOf(c))
	if err != nil {
		return err
	}
	return c.JSON(st)
}

// patchSettings is the partial update: fields absent from the body (also
// inside slo and limits) keep their saved values.
func (s *Server) patchSettings(c *fiber.Ctx) error {
	var in tenants.SettingsPatch
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	st, err := s.deps.Tenants.PatchSettings(c.UserContext(), tenantOf(c), in)
	if err != nil {
		return err
	}
	return c.JSON(st)
}

func (s *Server) putSettings(c *fiber.Ctx) error {
	var in tenants.SettingsInput
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	st, err := s.deps.Tenants.PutSettings(c.UserContext(), tenantOf(c), in)
	if err != nil {
		return err
	}
	return c.JSON(st)
}
