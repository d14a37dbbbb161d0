// Package web holds the dashboard's static assets (HTML, ES modules, CSS),
// embedded into the binary with go:embed so that building or running
// RouteBalance never needs Node. The api package serves them at "/".
//
// The dashboard talks to the server only through the /api/v1 JSON API; see
// README.md for the pages, the session model and the endpoints it calls.
package web

import (
	"embed"
	"io/fs"
)

//go:embed static
var static embed.FS

// Assets returns the dashboard's files rooted at the static folder:
// "index.html", "app.css", "js/main.js" and so on.
func Assets() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		// fs.Sub only fails for an invalid path literal, which is fixed
		// at compile time.
		panic("web: " + err.Error())
	}
	return sub
}
