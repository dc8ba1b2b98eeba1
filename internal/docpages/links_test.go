package docpages_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// readmeMaxLines is the front door's size: what Servo is, the two
// commands, a worker per language, and links into docs/.
const readmeMaxLines = 200

// TestReadme: README.md is a front door of at most readmeMaxLines lines
// that gives the two commands (.ci/run runs the test command the README
// gives) and links into every part of docs/ a newcomer looks for.
func TestReadme(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if n := strings.Count(readme, "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the details into docs/ and link to them", n, readmeMaxLines)
	}
	blocks, err := fences(readme)
	if err != nil {
		t.Fatal(err)
	}
	var commands []string
	for _, bl := range blocks {
		for _, l := range strings.Split(bl.text, "\n") {
			if i := strings.Index(l, "#"); i >= 0 {
				l = l[:i]
			}
			commands = append(commands, strings.TrimSpace(l))
		}
	}
	for _, c := range []string{"go run ./cmd/servo dev", "go test ./..."} {
		if !slices.Contains(commands, c) {
			t.Errorf("README.md gives no command line %q in a code block", c)
		}
	}
	for _, doc := range []string{"docs/concepts.md", "docs/local.md", "docs/workers/README.md", "docs/workers/go.md",
		"docs/workers/python.md", "docs/workers/typescript.md", "docs/operations.md", "docs/reference.md", "docs/contract.md"} {
		if !strings.Contains(readme, "]("+doc) {
			t.Errorf("README.md does not link to %s", doc)
		}
	}
}

// TestRelativeLinks: every relative link (and image) of README.md,
// docs/*.md and docs/workers/*.md leads to a file or folder of the
// checkout, and its #anchor, into a Markdown file, to one of that file's
// headings (as GitHub names them) or explicit anchors.
func TestRelativeLinks(t *testing.T) {
	files := []string{filepath.Join(repo, "README.md")}
	for _, g := range []string{"docs/*.md", "docs/workers/*.md"} {
		m, err := filepath.Glob(filepath.Join(repo, g))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	anchorsOf := map[string]map[string]bool{}
	anchors := func(path string) (map[string]bool, error) {
		if a, ok := anchorsOf[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchorsOf[path] = a
		return a, nil
	}
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(repo, f)
		for _, l := range relativeLinks(string(b)) {
			checked++
			where := fmt.Sprintf("%s:%d: link %s", name, l.line, l.target)
			path, frag, _ := strings.Cut(l.target, "#")
			p, err := url.PathUnescape(path)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			target := f
			if p != "" {
				target = filepath.Join(filepath.Dir(f), filepath.FromSlash(p))
				if rel, err := filepath.Rel(repo, target); err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s: leads out of the checkout", where)
					continue
				}
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s: no such file", where)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			a, err := anchors(target)
			if err != nil {
				t.Errorf("%s: %v", where, err)
			} else if !a[strings.ToLower(frag)] {
				t.Errorf("%s: no heading or anchor #%s there", where, frag)
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links found in README.md and docs/: is the link syntax still recognised?", checked)
	}
}

// link is a relative link of a Markdown file.
type link struct {
	line   int
	target string
}

var (
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	htmlLink   = regexp.MustCompile(`(?i)<(?:a|img)\s[^>]*?(?:href|src)="([^"]+)"`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
)

// proseLine is a line of markdown outside fenced code blocks, and its
// index in the document (line i+1).
type proseLine struct {
	i    int
	text string
}

// proseLines returns md's lines outside fenced code blocks, in order.
func proseLines(md string) []proseLine {
	var out []proseLine
	inFence := ""
	for i, l := range strings.Split(md, "\n") {
		t := strings.TrimLeft(l, " ")
		if f := fenceOf(t); f != "" && (inFence == "" || strings.HasPrefix(strings.TrimSpace(t), inFence) && strings.Trim(strings.TrimSpace(t), inFence[:1]) == "") {
			if inFence == "" {
				inFence = f
			} else {
				inFence = ""
			}
			continue
		}
		if inFence != "" {
			continue
		}
		out = append(out, proseLine{i, l})
	}
	return out
}

// relativeLinks returns the relative link targets of md, outside code
// blocks and code spans: inline links and images, reference definitions
// and HTML href/src attributes.
func relativeLinks(md string) []link {
	var out []link
	for _, pl := range proseLines(md) {
		i, l := pl.i, pl.text
		l = codeSpan.ReplaceAllString(l, "")
		var targets []string
		for _, re := range []*regexp.Regexp{inlineLink, refLink, htmlLink} {
			for _, m := range re.FindAllStringSubmatch(l, -1) {
				targets = append(targets, m[1])
			}
		}
		for _, tg := range targets {
			if scheme.MatchString(tg) || strings.HasPrefix(tg, "//") {
				continue
			}
			out = append(out, link{line: i + 1, target: tg})
		}
	}
	return out
}

var (
	explicitAnchor = regexp.MustCompile(`(?i)<a\s+(?:name|id)="([^"]+)"`)
	mdLinkText     = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag        = regexp.MustCompile(`<[^>]+>`)
)

// headingAnchors returns the anchors of md's headings as GitHub makes
// them (lower case; markup, punctuation and symbols dropped; spaces to
// hyphens; -1, -2, … for repeats) and its explicit <a name|id> anchors.
func headingAnchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, pl := range proseLines(md) {
		l := pl.text
		t := strings.TrimLeft(l, " ")
		for _, m := range explicitAnchor.FindAllStringSubmatch(l, -1) {
			out[strings.ToLower(m[1])] = true
		}
		h := strings.TrimLeft(t, "#")
		if n := len(t) - len(h); n == 0 || n > 6 || (h != "" && h[0] != ' ') || len(l)-len(t) > 3 {
			continue
		}
		a := githubAnchor(h)
		if k := seen[a]; k > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, k)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

// githubAnchor is the anchor GitHub gives a heading's text.
func githubAnchor(h string) string {
	h = strings.TrimSpace(strings.TrimRight(strings.TrimSpace(h), "#"))
	h = mdLinkText.ReplaceAllString(h, "$1")
	h = htmlTag.ReplaceAllString(h, "")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Pc, r) || r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func TestGithubAnchor(t *testing.T) {
	for h, want := range map[string]string{
		"4.2 Bodies":                                "42-bodies",
		"9.2 Submit — `POST /v1/tasks`":             "92-submit--post-v1tasks",
		"servo dev":                                 "servo-dev",
		"Worker SDKs: Go, Python, TypeScript":       "worker-sdks-go-python-typescript",
		"Pull pools: workers without inbound ports": "pull-pools-workers-without-inbound-ports",
		"[Linked](x.md) heading_1 #":                "linked-heading_1",
	} {
		if got := githubAnchor(h); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", h, got, want)
		}
	}
	a := headingAnchors("# T\n## A\n```\n## not a heading\n```\n## A\n<a id=\"Custom\"></a>\n")
	for _, want := range []string{"t", "a", "a-1", "custom"} {
		if !a[want] {
			t.Errorf("headingAnchors: no %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("headingAnchors: a heading in a code block")
	}
	links := relativeLinks("[a](x.md#y) `[no](z.md)` [![i](img.png)](big.png) [w](https://e.com)\n```\n[no](c.md)\n```\n[r]: ref.md\n")
	var got []string
	for _, l := range links {
		got = append(got, l.target)
	}
	if strings.Join(got, " ") != "x.md#y img.png big.png ref.md" {
		t.Errorf("relativeLinks: %q", got)
	}
}
