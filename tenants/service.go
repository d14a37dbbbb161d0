package tenants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/mail"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/routebalance/routebalance/routing"
)

// Config holds the Service's settings.
type Config struct {
	// Password is the argon2id cost.
	Password PasswordParams
	// KeyCacheTTL bounds how long a resolved key is served from memory.
	// Changes made through this process invalidate at once; the TTL only
	// bounds how stale a change made by another replica can be.
	KeyCacheTTL time.Duration
	// KeyCacheSize caps the number of cached keys.
	KeyCacheSize int
	// TouchInterval is how often last_used_at updates are written.
	TouchInterval time.Duration
	// AllowPrivateEndpoints lets tenants register loopback and private
	// addresses (demo, tests, on-premises clusters).
	AllowPrivateEndpoints bool
	// LoginMaxFailures failed logins for one email within LoginWindow
	// block further logins for that email until the window ends.
	LoginMaxFailures int
	LoginWindow      time.Duration
}

// DefaultConfig returns the production defaults.
func DefaultConfig() Config {
	return Config{
		Password:      DefaultPasswordParams(),
		KeyCacheTTL:   30 * time.Second,
		KeyCacheSize:  100_000,
		TouchInterval: 5 * time.Second,
		// Ten guesses per quarter hour: ~1000 a day per account, far below
		// what a 10-character password with two classes needs.
		LoginMaxFailures: 10,
		LoginWindow:      15 * time.Minute,
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if err := c.Password.Validate(); err != nil {
		return err
	}
	if c.KeyCacheTTL <= 0 || c.KeyCacheSize <= 0 || c.TouchInterval <= 0 {
		return errors.New("tenants: key cache TTL, size and touch interval must be positive")
	}
	if c.LoginMaxFailures <= 0 || c.LoginWindow <= 0 {
		return errors.New("tenants: login failure limit and window must be positive")
	}
	return nil
}

// Deps are the Service's collaborators.
type Deps struct {
	Store    Store
	Sessions *Sessions
	Sealer   *Sealer
	// Clock may be nil for the wall clock.
	Clock routing.Clock
	// Log may be nil for slog.Default().
	Log *slog.Logger
	// Resolver may be nil for net.DefaultResolver.
	Resolver Resolver
}

// Service is the tenants domain: accounts, sessions, keys, clusters,
// instances, settings and API-key resolution. It is safe for concurrent use.
type Service struct {
	cfg       Config
	store     Store
	sessions  *Sessions
	sealer    *Sealer
	clock     routing.Clock
	log       *slog.Logger
	endpoints EndpointPolicy
	dummyHash string
	cache     *keyCache
	logins    *loginLimiter

	touchMu sync.Mutex
	touched map[string]time.Time
}

// NewService returns a Service.
func NewService(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil || deps.Sessions == nil || deps.Sealer == nil {
		return nil, errors.New("tenants: store, sessions and sealer are required")
	}
	if deps.Clock == nil {
		deps.Clock = routing.WallClock{}
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	dummy, err := HashPassword("timing-equaliser-not-a-password", cfg.Password)
	if err != nil {
		return nil, err
	}
	return &Service{
		cfg:       cfg,
		store:     deps.Store,
		sessions:  deps.Sessions,
		sealer:    deps.Sealer,
		clock:     deps.Clock,
		log:       deps.Log,
		endpoints: EndpointPolicy{AllowPrivate: cfg.AllowPrivateEndpoints, Resolver: deps.Resolver},
		dummyHash: dummy,
		cache:     newKeyCache(cfg.KeyCacheTTL, cfg.KeyCacheSize),
		logins:    newLoginLimiter(cfg.LoginMaxFailures, cfg.LoginWindow),
		touched:   map[string]time.Time{},
	}, nil
}

// Endpoints returns the policy that registered URLs were checked with, for
// dialers that must enforce it at connection time.
func (s *Service) Endpoints() EndpointPolicy { return s.endpoints }

func newID() string { return uuid.Must(uuid.NewV7()).String() }

func (s *Service) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

func fieldErr(field, format string, a ...any) error {
	return &routing.FieldError{Field: field, Msg: fmt.Sprintf(format, a...)}
}

// ---- accounts and sessions ----

// SignupInput is the body of POST /api/v1/signup.
type SignupInput struct {
	Email    string `json:"email"`
	Password string `json:"password"`
	Name     string `json:"name"`
}

func normaliseEmail(raw string) (string, error) {
	e := strings.ToLower(strings.TrimSpace(raw))
	if e == "" {
		return "", fieldErr("email", "is required")
	}
	a, err := mail.ParseAddress(e)
	if err != nil || a.Address != e || !strings.Contains(e, "@") || len(e) > 254 {
		return "", fieldErr("email", "must be an email address like name@example.com")
	}
	return e, nil
}

func checkName(field, name string, required bool) (string, error) {
	if err := checkNoControl(field, name); err != nil {
		return "", err
	}
	name = strings.TrimSpace(name)
	if name == "" && required {
		return "", fieldErr(field, "is required")
	}
	if n := utf8.RuneCountInString(name); n > 100 || !utf8.ValidString(name) {
		return "", fieldErr(field, "must be valid UTF-8 of at most 100 characters")
	}
	return name, nil
}

// DefaultSettings are a new tenant's settings: the balanced preset and no
// SLOs.
func DefaultSettings() Settings {
	w, _ := routing.PresetWeights(routing.PresetBalanced)
	return Settings{Preset: routing.PresetBalanced, Weights: w}
}

// Signup creates a tenant and its first user and logs the user in.
func (s *Service) Signup(ctx context.Context, in SignupInput) (Tenant, TokenPair, error) {
	email, err := normaliseEmail(in.Email)
	if err != nil {
		return Tenant{}, TokenPair{}, err
	}
	if in.Password == "" {
		return Tenant{}, TokenPair{}, fieldErr("password", "is required")
	}
	if err := CheckPasswordStrength(in.Password, email); err != nil {
		return Tenant{}, TokenPair{}, err
	}
	name, err := checkName("name", in.Name, true)
	if err != nil {
		return Tenant{}, TokenPair{}, err
	}
	hash, err := HashPassword(in.Password, s.cfg.Password)
	if err != nil {
		return Tenant{}, TokenPair{}, err
	}
	now := s.now()
	t := Tenant{ID: newID(), Name: name, CreatedAt: now, ConfigVersion: 1}
	u := User{ID: newID(), TenantID: t.ID, Email: email, PasswordHash: hash, CreatedAt: now}
	if err := s.store.CreateAccount(ctx, t, u, DefaultSettings()); err != nil {
		if errors.Is(err, ErrConflict) {
			return Tenant{}, TokenPair{}, fmt.Errorf("email is already registered: %w", ErrConflict)
		}
		return Tenant{}, TokenPair{}, fmt.Errorf("create account: %w", err)
	}
	pair, err := s.sessions.Issue(u.ID, t.ID)
	if err != nil {
		return Tenant{}, TokenPair{}, err
	}
	s.log.InfoContext(ctx, "tenant signed up", slog.String("tenant_id", t.ID), slog.String("user_id", u.ID))
	return t, pair, nil
}

// errBadLogin is the one message for an unknown email and a wrong password.
var errBadLogin = fmt.Errorf("invalid email or password: %w", ErrUnauthorized)

// Login checks a password and returns new tokens. Unknown emails cost the
// same hash as known ones and get the same error. After
// Config.LoginMaxFailures failures for one email within Config.LoginWindow
// it returns ErrTooManyAttempts until the window ends.
func (s *Service) Login(ctx context.Context, email, password string) (TokenPair, error) {
	e, err := normaliseEmail(email)
	if err != nil || password == "" || len(password) > 4*MaxPasswordLen {
		VerifyPassword(password, s.dummyHash) //nolint:errcheck // equal timing
		return TokenPair{}, errBadLogin
	}
	now := s.clock.Now()
	if s.logins.blocked(e, now) {
		return TokenPair{}, ErrTooManyAttempts
	}
	u, err := s.store.UserByEmail(ctx, e)
	if errors.Is(err, ErrNotFound) {
		VerifyPassword(password, s.dummyHash) //nolint:errcheck // equal timing
		s.logins.fail(e, now)
		return TokenPair{}, errBadLogin
	}
	if err != nil {
		return TokenPair{}, fmt.Errorf("find user: %w", err)
	}
	ok, err := VerifyPassword(password, u.PasswordHash)
	if err != nil {
		return TokenPair{}, fmt.Errorf("user %s: %w", u.ID, err)
	}
	if !ok {
		s.logins.fail(e, now)
		return TokenPair{}, errBadLogin
	}
	s.logins.reset(e)
	return s.sessions.Issue(u.ID, u.TenantID)
}

// Refresh exchanges a valid refresh token for a new pair, provided the
// tenant still exists.
func (s *Service) Refresh(ctx context.Context, refreshToken string) (TokenPair, error) {
	sess, err := s.sessions.Verify(refreshToken, TokenRefresh)
	if err != nil {
		return TokenPair{}, err
	}
	if _, err := s.store.Tenant(ctx, sess.TenantID); err != nil {
		if errors.Is(err, ErrNotFound) {
			return TokenPair{}, fmt.Errorf("tenant is gone: %w", ErrUnauthorized)
		}
		return TokenPair{}, err
	}
	return s.sessions.Issue(sess.UserID, sess.TenantID)
}

// Authenticate verifies an access token.
func (s *Service) Authenticate(accessToken string) (Session, error) {
	return s.sessions.Verify(accessToken, TokenAccess)
}

// ---- settings helpers ----

func checkSLO(field string, o SLO) error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"ttft_ms", o.TTFTMs}, {"tpot_ms", o.TPOTMs}, {"e2e_ms", o.E2EMs},
		{"max_cost_usd_per_request", o.MaxCostUSDPerRequest}, {"monthly_budget_usd", o.MonthlyBudgetUSD},
	} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return fieldErr(field+"."+f.name, "must be a number >= 0 (0 means no budget), got %v", f.v)
		}
	}
	return nil
}

// resolvePreset validates a preset with optional weights and returns the
// weights to store: a named preset's own vector, or the given custom
// weights (required and on the simplex).
func resolvePreset(preset string, w *routing.Weights) (string, routing.Weights, error) {
	p := strings.ToLower(strings.TrimSpace(preset))
	if p == routing.PresetCustom || (p == "" && w != nil) {
		if w == nil {
			return "", routing.Weights{}, fieldErr("weights", "are required with the custom preset")
		}
		if err := w.Validate(); err != nil {
			return "", routing.Weights{}, err
		}
		return routing.PresetCustom, *w, nil
	}
	pw, err := routing.PresetWeights(p)
	if err != nil {
		return "", routing.Weights{}, fieldErr("preset", "must be quality, latency, cost, balanced or custom, got %q", preset)
	}
	if w != nil {
		if err := w.Validate(); err != nil {
			return "", routing.Weights{}, err
		}
	}
	return p, pw, nil
}

// Settings returns a tenant's routing defaults.
func (s *Service) Settings(ctx context.Context, tenantID string) (Settings, error) {
	return s.store.Settings(ctx, tenantID)
}

// SettingsInput is the body of PUT /api/v1/settings. Preset is required;
// weights are required with custom and ignored (but still validated) with a
// named preset.
type SettingsInput struct {
	DefaultClusterID string           `json:"default_cluster_id"`
	Preset           string           `json:"preset"`
	Weights          *routing.Weights `json:"weights"`
	SLO              SLO              `json:"slo"`
	// Limits replaces the tenant's rate limits; absent keeps them.
	Limits *Limits `json:"limits"`
}

// PutSettings replaces a tenant's routing defaults.
func (s *Service) PutSettings(ctx context.Context, tenantID string, in SettingsInput) (Settings, error) {
	if in.Preset == "" && in.Weights == nil {
		return Settings{}, fieldErr("preset", "is required (quality, latency, cost, balanced or custom)")
	}
	preset, w, err := resolvePreset(in.Preset, in.Weights)
	if err != nil {
		return Settings{}, err
	}
	if err := checkSLO("slo", in.SLO); err != nil {
		return Settings{}, err
	}
	if in.DefaultClusterID != "" {
		if _, err := s.store.Cluster(ctx, tenantID, in.DefaultClusterID); err != nil {
			if errors.Is(err, ErrNotFound) {
				return Settings{}, fieldErr("default_cluster_id", "no such cluster")
			}
			return Settings{}, err
		}
	}
	st := Settings{DefaultClusterID: in.DefaultClusterID, Preset: preset, Weights: w, SLO: in.SLO}
	if st.Limits, err = s.settingsLimits(ctx, tenantID, in.Limits); err != nil {
		return Settings{}, err
	}
	if err := s.store.PutSettings(ctx, tenantID, st); err != nil {
		return Settings{}, err
	}
	s.cache.invalidateTenant(tenantID)
	return st, nil
}

// ---- keys ----

// KeyInput is the body of POST /api/v1/keys.
type KeyInput struct {
	Name      string `json:"name"`
	ClusterID string `json:"cluster_id"`
}

// CreateKey makes a new API key and returns its record and its secret,
// which is never available again.
func (s *Service) CreateKey(ctx context.Context, tenantID string, in KeyInput) (Key, string, error) {
	name, err := checkName("name", in.Name, true)
	if err != nil {
		return Key{}, "", err
	}
	if in.ClusterID != "" {
		if _, err := s.store.Cluster(ctx, tenantID, in.ClusterID); err != nil {
			if errors.Is(err, ErrNotFound) {
				return Key{}, "", fieldErr("cluster_id", "no such cluster")
			}
			return Key{}, "", err
		}
	}
	secret, prefix, err := NewKeySecret()
	if err != nil {
		return Key{}, "", err
	}
	k := Key{ID: newID(), TenantID: tenantID, Name: name, Prefix: prefix, ClusterID: in.ClusterID, CreatedAt: s.now()}
	if err := s.store.CreateKey(ctx, k, HashKey(secret)); err != nil {
		return Key{}, "", fmt.Errorf("create key: %w", err)
	}
	return k, secret, nil
}

// Keys lists a tenant's keys, revoked ones included, without secrets.
func (s *Service) Keys(ctx context.Context, tenantID string) ([]Key, error) {
	return s.store.Keys(ctx, tenantID)
}

// RevokeKey revokes a key; it stops resolving at once in this process.
// Revoking twice is not an error.
func (s *Service) RevokeKey(ctx context.Context, tenantID, id string) error {
	k, err := s.store.Key(ctx, tenantID, id)
	if err != nil {
		return err
	}
	if k.RevokedAt == nil {
		now := s.now()
		k.RevokedAt = &now
		if err := s.store.UpdateKey(ctx, k); err != nil {
			return err
		}
	}
	s.cache.invalidateTenant(tenantID)
	return nil
}

// KeyPatch is the body of PATCH /api/v1/keys/{id}; absent fields are
// left alone. Preset "" with no weights clears the key's override; an SLO
// of all zeros clears the key's SLO override.
type KeyPatch struct {
	Name      *string          `json:"name"`
	ClusterID *string          `json:"cluster_id"`
	Preset    *string          `json:"preset"`
	Weights   *routing.Weights `json:"weights"`
	SLO       *SLO             `json:"slo"`
	Limits    *Limits          `json:"limits"`
}

// UpdateKey applies a patch to a key.
func (s *Service) UpdateKey(ctx context.Context, tenantID, id string, p KeyPatch) (Key, error) {
	k, err := s.store.Key(ctx, tenantID, id)
	if err != nil {
		return Key{}, err
	}
	if p.Name != nil {
		if k.Name, err = checkName("name", *p.Name, true); err != nil {
			return Key{}, err
		}
	}
	if p.ClusterID != nil {
		if *p.ClusterID != "" {
			if _, err := s.store.Cluster(ctx, tenantID, *p.ClusterID); err != nil {
				if errors.Is(err, ErrNotFound) {
					return Key{}, fieldErr("cluster_id", "no such cluster")
				}
				return Key{}, err
			}
		}
		k.ClusterID = *p.ClusterID
	}
	if p.Preset != nil || p.Weights != nil {
		preset := ""
		if p.Preset != nil {
			preset = *p.Preset
		}
		if preset == "" && p.Weights == nil {
			k.Preset, k.Weights = "", nil
		} else {
			name, w, err := resolvePreset(preset, p.Weights)
			if err != nil {
				return Key{}, err
			}
			k.Preset, k.Weights = name, &w
		}
	}
	if p.SLO != nil {
		if err := checkSLO("slo", *p.SLO); err != nil {
			return Key{}, err
		}
		if *p.SLO == (SLO{}) {
			k.SLO = nil
		} else {
			o := *p.SLO
			k.SLO = &o
		}
	}
	if p.Limits != nil {
		if err := checkLimits("limits", *p.Limits); err != nil {
			return Key{}, err
		}
		k.Limits = *p.Limits
	}
	if err := s.store.UpdateKey(ctx, k); err != nil {
		return Key{}, err
	}
	s.cache.invalidateTenant(tenantID)
	return k, nil
}

// ---- clusters ----

// policyNames are the policies a cluster may select.
var policyNames = map[string]bool{
	"routebalance": true, "round-robin": true, "shortest-queue": true,
	"quality-only": true, "threshold": true, "chimera": true,
}

func checkPolicy(p routing.PolicyConfig) (routing.PolicyConfig, error) {
	p.Name = strings.ToLower(strings.TrimSpace(p.Name))
	if p.Name == "" {
		p.Name = "routebalance"
	}
	if !policyNames[p.Name] {
		return p, fieldErr("policy.name", "must be routebalance, round-robin, shortest-queue, quality-only, threshold or chimera, got %q", p.Name)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"threshold", p.Threshold}, {"slack", p.Slack}, {"switch_gain", p.SwitchGain}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return p, fieldErr("policy."+f.name, "must be a number >= 0, got %v", f.v)
		}
	}
	if p.Threshold > 1 {
		return p, fieldErr("policy.threshold", "is a quality in [0,1], got %v", p.Threshold)
	}
	return p, nil
}

// ClusterInput is the body of POST /api/v1/clusters.
type ClusterInput struct {
	Name   string                `json:"name"`
	Policy *routing.PolicyConfig `json:"policy"`
}

// CreateCluster makes a cluster with the default routebalance policy
// unless one is given.
func (s *Service) CreateCluster(ctx context.Context, tenantID string, in ClusterInput) (Cluster, error) {
	name, err := checkName("name", in.Name, true)
	if err != nil {
		return Cluster{}, err
	}
	var pol routing.PolicyConfig
	if in.Policy != nil {
		pol = *in.Policy
	}
	if pol, err = checkPolicy(pol); err != nil {
		return Cluster{}, err
	}
	now := s.now()
	c := Cluster{ID: newID(), TenantID: tenantID, Name: name, Policy: pol, CreatedAt: now, UpdatedAt: now}
	if err := s.store.CreateCluster(ctx, c); err != nil {
		return Cluster{}, fmt.Errorf("create cluster: %w", err)
	}
	s.cache.invalidateTenant(tenantID)
	return c, nil
}

// Clusters lists a tenant's clusters.
func (s *Service) Clusters(ctx context.Context, tenantID string) ([]Cluster, error) {
	return s.store.Clusters(ctx, tenantID)
}

// Cluster returns one of a tenant's clusters.
func (s *Service) Cluster(ctx context.Context, tenantID, id string) (Cluster, error) {
	return s.store.Cluster(ctx, tenantID, id)
}

// ClusterPatch is the body of PATCH /api/v1/clusters/{id}.
type ClusterPatch struct {
	Name   *string               `json:"name"`
	Policy *routing.PolicyConfig `json:"policy"`
}

// UpdateCluster applies a patch to a cluster.
func (s *Service) UpdateCluster(ctx context.Context, tenantID, id string, p ClusterPatch) (Cluster, error) {
	c, err := s.store.Cluster(ctx, tenantID, id)
	if err != nil {
		return Cluster{}, err
	}
	if p.Name != nil {
		if c.Name, err = checkName("name", *p.Name, true); err != nil {
			return Cluster{}, err
		}
	}
	if p.Policy != nil {
		if c.Policy, err = checkPolicy(*p.Policy); err != nil {
			return Cluster{}, err
		}
	}
	c.UpdatedAt = s.now()
	if err := s.store.UpdateCluster(ctx, c); err != nil {
		return Cluster{}, err
	}
	s.cache.invalidateTenant(tenantID)
	return c, nil
}

// DeleteCluster deletes a cluster and its instances.
func (s *Service) DeleteCluster(ctx context.Context, tenantID, id string) error {
	if err := s.store.DeleteCluster(ctx, tenantID, id); err != nil {
		return err
	}
	s.cache.invalidateTenant(tenantID)
	return nil
}

// ---- instances ----

// InstanceInput is the body of POST and PATCH on instances; absent fields
// keep their value (PATCH) or default (POST: tensor_parallel 1,
// quality_prior 0.5). An api_key of "" removes the upstream key.
type InstanceInput struct {
	BaseURL         *string  `json:"base_url"`
	Model           *string  `json:"model"`
	GPU             *string  `json:"gpu"`
	TensorParallel  *int     `json:"tensor_parallel"`
	PriceInPerMTok  *float64 `json:"price_in_per_mtok"`
	PriceOutPerMTok *float64 `json:"price_out_per_mtok"`
	MaxConcurrency  *int     `json:"max_concurrency"`
	QualityPrior    *float64 `json:"quality_prior"`
	Disabled        *bool    `json:"disabled"`
	APIKey          *string  `json:"api_key"`
}

// DefaultQualityPrior is an instance's quality_prior when none is given.
const DefaultQualityPrior = 0.5

func (s *Service) applyInstance(ctx context.Context, in *Instance, p InstanceInput) error {
	if p.BaseURL != nil {
		u, err := s.endpoints.CheckURL(ctx, "base_url", *p.BaseURL)
		if err != nil {
			return err
		}
		in.BaseURL = u
	}
	if p.Model != nil {
		if err := checkNoControl("model", *p.Model); err != nil {
			return err
		}
		m := strings.TrimSpace(*p.Model)
		if m == "" || len(m) > 256 || m == "auto" {
			return fieldErr("model", "must be the served model name (1–256 characters, not \"auto\")")
		}
		in.Model = m
	}
	if p.GPU != nil {
		g, err := checkText("gpu", *p.GPU, 64)
		if err != nil {
			return err
		}
		in.GPU = g
	}
	if p.TensorParallel != nil {
		if *p.TensorParallel < 1 || *p.TensorParallel > 64 {
			return fieldErr("tensor_parallel", "must be between 1 and 64, got %d", *p.TensorParallel)
		}
		in.TensorParallel = *p.TensorParallel
	}
	for _, f := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"price_in_per_mtok", p.PriceInPerMTok, &in.PriceInPerMTok}, {"price_out_per_mtok", p.PriceOutPerMTok, &in.PriceOutPerMTok}} {
		if f.v == nil {
			continue
		}
		if err := checkPrice(f.name, *f.v); err != nil {
			return err
		}
		*f.dst = *f.v
	}
	if p.MaxConcurrency != nil {
		if *p.MaxConcurrency < 0 || *p.MaxConcurrency > 100_000 {
			return fieldErr("max_concurrency", "must be between 0 (scheduler default) and 100000, got %d", *p.MaxConcurrency)
		}
		in.MaxConcurrency = *p.MaxConcurrency
	}
	if p.QualityPrior != nil {
		q := *p.QualityPrior
		if math.IsNaN(q) || q < 0 || q > 1 {
			return fieldErr("quality_prior", "must be in [0,1], got %v", q)
		}
		in.QualityPrior = q
	}
	if p.Disabled != nil {
		in.Disabled = *p.Disabled
	}
	if p.APIKey != nil {
		if *p.APIKey == "" {
			in.SealedAPIKey, in.HasAPIKey = nil, false
		} else {
			if len(*p.APIKey) > 4096 {
				return fieldErr("api_key", "must be at most 4096 bytes")
			}
			if err := checkUpstreamKey("api_key", *p.APIKey); err != nil {
				return err
			}
			sealed, err := s.sealer.Seal(*p.APIKey, in.ID)
			if err != nil {
				return err
			}
			in.SealedAPIKey, in.HasAPIKey = sealed, true
		}
	}
	return nil
}

// CreateInstance registers an instance in a cluster. base_url and model are
// required; the URL must pass the endpoint policy.
func (s *Service) CreateInstance(ctx context.Context, tenantID, clusterID string, p InstanceInput) (Instance, error) {
	if _, err := s.store.Cluster(ctx, tenantID, clusterID); err != nil {
		return Instance{}, err
	}
	if p.BaseURL == nil || strings.TrimSpace(*p.BaseURL) == "" {
		return Instance{}, fieldErr("base_url", "is required")
	}
	if p.Model == nil {
		return Instance{}, fieldErr("model", "is required")
	}
	now := s.now()
	in := Instance{ID: newID(), ClusterID: clusterID, TensorParallel: 1, QualityPrior: DefaultQualityPrior, CreatedAt: now, UpdatedAt: now}
	if err := s.applyInstance(ctx, &in, p); err != nil {
		return Instance{}, err
	}
	if err := s.store.CreateInstance(ctx, tenantID, in); err != nil {
		return Instance{}, fmt.Errorf("create instance: %w", err)
	}
	s.cache.invalidateTenant(tenantID)
	return in, nil
}

// Instances lists a cluster's instances (upstream keys stay sealed).
func (s *Service) Instances(ctx context.Context, tenantID, clusterID string) ([]Instance, error) {
	if _, err := s.store.Cluster(ctx, tenantID, clusterID); err != nil {
		return nil, err
	}
	return s.store.Instances(ctx, tenantID, clusterID)
}

// Instance returns one instance.
func (s *Service) Instance(ctx context.Context, tenantID, clusterID, id string) (Instance, error) {
	return s.store.Instance(ctx, tenantID, clusterID, id)
}

// UpdateInstance applies a patch to an instance.
func (s *Service) UpdateInstance(ctx context.Context, tenantID, clusterID, id string, p InstanceInput) (Instance, error) {
	in, err := s.store.Instance(ctx, tenantID, clusterID, id)
	if err != nil {
		return Instance{}, err
	}
	if err := s.applyInstance(ctx, &in, p); err != nil {
		return Instance{}, err
	}
	in.UpdatedAt = s.now()
	if err := s.store.UpdateInstance(ctx, tenantID, in); err != nil {
		return Instance{}, err
	}
	s.cache.invalidateTenant(tenantID)
	return in, nil
}

// DeleteInstance removes an instance.
func (s *Service) DeleteInstance(ctx context.Context, tenantID, clusterID, id string) error {
	if err := s.store.DeleteInstance(ctx, tenantID, clusterID, id); err != nil {
		return err
	}
	s.cache.invalidateTenant(tenantID)
	return nil
}

// OpenAPIKey decrypts an instance's upstream key ("" when it has none).
func (s *Service) OpenAPIKey(in Instance) (routing.Secret, error) {
	if len(in.SealedAPIKey) == 0 {
		return "", nil
	}
	pt, err := s.sealer.Open(in.SealedAPIKey, in.ID)
	if err != nil {
		return "", fmt.Errorf("instance %s upstream key: %w", in.ID, err)
	}
	return routing.Secret(pt), nil
}
