package web

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"testing"
)

// importRE finds static and dynamic module specifiers: from './x.js',
// import './x.js', import('./x.js').
var importRE = regexp.MustCompile(`(?m)(?:from\s+|\bimport\(\s*|^import\s+)['"]([^'"]+)['"]`)

// TestModuleGraphResolves walks every import of every module from the ones
// index.html loads and fails on a specifier that names no embedded file, a
// bare package name (there is no bundler) or an off-site URL.
func TestModuleGraphResolves(t *testing.T) {
	fsys := Assets()
	index, err := fs.ReadFile(fsys, "index.html")
	if err != nil {
		t.Fatal(err)
	}
	srcRE := regexp.MustCompile(`(?:src|href)="(/[^"]*)"`)
	var queue []string
	for _, m := range srcRE.FindAllStringSubmatch(string(index), -1) {
		p := strings.TrimPrefix(m[1], "/")
		if p == "" || strings.HasSuffix(p, "/") || !strings.Contains(path.Base(p), ".") {
			continue // in-app links such as href="/"
		}
		if _, err := fs.Stat(fsys, p); err != nil {
			t.Errorf("index.html references %s, which is not embedded", m[1])
		}
		if strings.HasSuffix(p, ".js") {
			queue = append(queue, p)
		}
	}
	if len(queue) == 0 {
		t.Fatal("index.html loads no module")
	}
	seen := map[string]bool{}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		src, err := fs.ReadFile(fsys, p)
		if err != nil {
			t.Errorf("module %s: %v", p, err)
			continue
		}
		for _, m := range importRE.FindAllStringSubmatch(string(src), -1) {
			spec := m[1]
			if !strings.HasPrefix(spec, "./") && !strings.HasPrefix(spec, "../") {
				t.Errorf("%s imports %q: only relative specifiers resolve without a bundler", p, spec)
				continue
			}
			queue = append(queue, path.Join(path.Dir(p), spec))
		}
	}
	// Every module on disk should be reachable, or it is dead weight.
	fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".js") && !seen[p] {
			t.Errorf("module %s is embedded but never imported", p)
		}
		return nil
	})
}

// TestNoInlineCode keeps the markup compatible with the CSP the server
// sends (script-src 'self', style-src 'self'): no inline scripts, inline
// event handlers or style attributes in HTML, and no innerHTML in modules.
func TestNoInlineCode(t *testing.T) {
	fsys := Assets()
	checks := []struct {
		ext string
		re  *regexp.Regexp
		why string
	}{
		{".html", regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`), "inline script"},
		{".html", regexp.MustCompile(`<script(?:(?:\s+(?:type|async|defer|crossorigin)(?:="[^"]*")?)*)\s*>`), "script without src"},
		{".html", regexp.MustCompile(`\son[a-z]+\s*=`), "inline event handler"},
		{".html", regexp.MustCompile(`\sstyle\s*=`), "style attribute"},
		{".html", regexp.MustCompile(`<style`), "style element"},
		{".js", regexp.MustCompile(`\.innerHTML\s*=|\.outerHTML\s*=|insertAdjacentHTML|document\.write`), "HTML string injection"},
		{".js", regexp.MustCompile(`\beval\s*\(|new Function\s*\(`), "eval"},
		{".js", regexp.MustCompile(`setAttribute\(\s*['"]style['"]`), "style attribute"},
	}
	fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := fs.ReadFile(fsys, p)
		for _, c := range checks {
			if path.Ext(p) != c.ext {
				continue
			}
			if loc := c.re.FindIndex(b); loc != nil {
				t.Errorf("%s: %s at byte %d: %q", p, c.why, loc[0], b[loc[0]:min(len(b), loc[1]+20)])
			}
		}
		return nil
	})
}

// TestVendoredUPlotUnmodified checks the vendored uPlot files against the
// SHA-256 sums recorded in static/vendor/uplot/README.md, which names the
// npm tarball they were copied from, so a local edit cannot slip in.
func TestVendoredUPlotUnmodified(t *testing.T) {
	fsys := Assets()
	readme, err := fs.ReadFile(fsys, "vendor/uplot/README.md")
	if err != nil {
		t.Fatal(err)
	}
	sums := regexp.MustCompile(`(?m)^([0-9a-f]{64})  (\S+)$`).FindAllStringSubmatch(string(readme), -1)
	if len(sums) != 3 {
		t.Fatalf("README lists %d sums, want 3 (uPlot.esm.js, uPlot.min.css, LICENSE)", len(sums))
	}
	for _, m := range sums {
		b, err := fs.ReadFile(fsys, "vendor/uplot/"+m[2])
		if err != nil {
			t.Errorf("%s: %v", m[2], err)
			continue
		}
		if got := fmt.Sprintf("%x", sha256.Sum256(b)); got != m[1] {
			t.Errorf("vendor/uplot/%s: sha256 %s, README records %s", m[2], got, m[1])
		}
	}
	if !strings.Contains(string(readme), "1.6.32") {
		t.Error("README does not name the version")
	}
}
