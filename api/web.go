package api

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"path"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/web"
)

// webCSP is the Content-Security-Policy of every dashboard response: only
// same-origin scripts, styles and API calls; no inline script, no framing,
// no plugins, no base-URI games.
const webCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"font-src 'self'; connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; " +
	"frame-ancestors 'none'; object-src 'none'"

// webAsset is one embedded file, read once at start.
type webAsset struct {
	body        []byte
	contentType string
	etag        string
}

// webAssets serves the embedded dashboard. Paths that name a file serve it;
// other paths without a file extension (deep links such as /cluster) serve
// index.html so the client-side router can take over.
type webAssets struct {
	files map[string]webAsset
}

// webContentTypes maps the extensions the dashboard uses to their media
// types; a fixed table keeps responses independent of the host's mime db.
var webContentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".json": "application/json",
	".png":  "image/png",
	".ico":  "image/x-icon",
	".txt":  "text/plain; charset=utf-8",
}

// newWebAssets reads every file of fsys into memory with its ETag.
func newWebAssets(fsys fs.FS) (*webAssets, error) {
	w := &webAssets{files: map[string]webAsset{}}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		ct, ok := webContentTypes[path.Ext(p)]
		if !ok {
			ct = "application/octet-stream"
		}
		sum := sha256.Sum256(b)
		w.files["/"+p] = webAsset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if _, ok := w.files["/index.html"]; !ok {
		return nil, fs.ErrNotExist
	}
	return w, nil
}

// mountWeb serves the dashboard for GET and HEAD requests that no earlier
// route took. It must be mounted last. It is middleware (app.Use), not a
// route, so fiber still answers 405 for a known path with the wrong method
// and 404 for unknown paths of other methods. Paths under /api/ and /v1/
// are never answered with the dashboard, nor is /metrics (absent from the
// main listener without a metrics token: a scrape must see a 404, not
// HTML): they fall through to the app's 404 handling.
func (s *Server) mountWeb(app *fiber.App) {
	assets, err := newWebAssets(web.Assets())
	if err != nil {
		// The assets are embedded at compile time; a missing index.html
		// is a build defect, so say so loudly and serve the API alone.
		s.log.Error("dashboard assets unusable; the dashboard is not served", "err", err)
		return
	}
	app.Use(assets.serve)
}

// setWebHeaders sets the security headers every dashboard response carries.
func setWebHeaders(c *fiber.Ctx) {
	c.Set("Content-Security-Policy", webCSP)
	c.Set("X-Frame-Options", "DENY")
	c.Set("X-Content-Type-Options", "nosniff")
	c.Set("Referrer-Policy", "no-referrer")
	c.Set("Cross-Origin-Opener-Policy", "same-origin")
	c.Set("Cross-Origin-Resource-Policy", "same-origin")
	c.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
}

// serve answers one dashboard request.
func (w *webAssets) serve(c *fiber.Ctx) error {
	p := c.Path()
	if m := c.Method(); m != fiber.MethodGet && m != fiber.MethodHead {
		return c.Next()
	}
	if p == "/api" || p == "/v1" || strings.HasPrefix(p, "/api/") || strings.HasPrefix(p, "/v1/") ||
		p == "/metrics" || p == "/metrics/" {
		return c.Next()
	}
	clean := path.Clean("/" + p)
	if clean == "/" {
		clean = "/index.html"
	}
	a, ok := w.files[clean]
	if !ok {
		if path.Ext(clean) != "" {
			setWebHeaders(c)
			c.Set(fiber.HeaderCacheControl, "no-store")
			return c.Status(fiber.StatusNotFound).SendString("not found")
		}
		// A deep link into the single-page app: serve the shell.
		a = w.files["/index.html"]
	}
	setWebHeaders(c)
	// No-cache with an ETag: the browser revalidates each time and gets a
	// cheap 304 while the binary is unchanged, and never runs stale code
	// after an upgrade (file names carry no content hash).
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set(fiber.HeaderETag, a.etag)
	c.Set(fiber.HeaderContentType, a.contentType)
	if inm := c.Get(fiber.HeaderIfNoneMatch); inm != "" && etagMatches(inm, a.etag) {
		return c.SendStatus(fiber.StatusNotModified)
	}
	return c.Status(fiber.StatusOK).Send(a.body)
}

// etagMatches reports whether an If-None-Match header names etag.
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		t = strings.TrimPrefix(t, "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}
