package tenants

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

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
	// LoginMaxFailures failed logins for one email from one client
	// address within LoginWindow block further logins for that email from
	// that address until the window ends; LoginMaxFailuresPerIP failures
	// from one address over any emails block that address (limiter.go).
	LoginMaxFailures      int
	LoginMaxFailuresPerIP int
	LoginWindow           time.Duration
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
		// A hundred per address: room for an office behind one NAT
		// mistyping, far too few to spray a password list.
		LoginMaxFailuresPerIP: 100,
		LoginWindow:           15 * time.Minute,
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
	if c.LoginMaxFailures <= 0 || c.LoginMaxFailuresPerIP <= 0 || c.LoginWindow <= 0 {
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
		logins:    newLoginLimiter(cfg.LoginMaxFailures, cfg.LoginMaxFailuresPerIP, cfg.LoginWindow),
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
