package docpages_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// block is a fenced code block of a page.
type block struct {
	line  int               // line of the opening fence, from 1
	lang  string            // the info string's first word
	attrs map[string]string // its other words: key or key=value
	text  string            // the contents, each line ending in \n
}

// fences returns every fenced code block of md (``` or ~~~, of three or
// more), with its info string parsed.
func fences(md string) ([]block, error) {
	var out []block
	lines := strings.SplitAfter(md, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimLeft(lines[i], " ")
		fence := fenceOf(l)
		if fence == "" || len(lines[i])-len(l) > 3 {
			continue
		}
		info := strings.TrimSpace(strings.TrimPrefix(l, fence))
		words, err := infoWords(info)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", i+1, err)
		}
		b := block{line: i + 1, attrs: map[string]string{}}
		if len(words) > 0 {
			b.lang = words[0]
			for _, w := range words[1:] {
				k, v, _ := strings.Cut(w, "=")
				if _, dup := b.attrs[k]; dup {
					return nil, fmt.Errorf("line %d: %s twice in the info string", i+1, k)
				}
				b.attrs[k] = v
			}
		}
		var text strings.Builder
		closed := false
		for i++; i < len(lines); i++ {
			if c := strings.TrimSpace(lines[i]); strings.HasPrefix(c, fence) && strings.Trim(c, fence[:1]) == "" {
				closed = true
				break
			}
			text.WriteString(lines[i])
		}
		if !closed {
			return nil, fmt.Errorf("line %d: the code block is never closed", b.line)
		}
		b.text = text.String()
		if b.text != "" && !strings.HasSuffix(b.text, "\n") {
			b.text += "\n"
		}
		out = append(out, b)
	}
	return out, nil
}

// fenceOf is the fence that opens line l ("```", "````", "~~~"), or "".
func fenceOf(l string) string {
	for _, c := range []string{"`", "~"} {
		n := len(l) - len(strings.TrimLeft(l, c))
		if n >= 3 {
			return l[:n]
		}
	}
	return ""
}

// infoWords splits an info string into words; a value may be quoted:
// after="some text".
func infoWords(s string) ([]string, error) {
	var words []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		end := strings.IndexAny(s, " \"")
		switch {
		case end < 0:
			return append(words, s), nil
		case s[end] == ' ':
			words, s = append(words, s[:end]), s[end:]
		default: // a quoted value
			q, err := strconv.QuotedPrefix(s[end:])
			if err != nil {
				return nil, fmt.Errorf("info string %q: unterminated quote", s)
			}
			v, _ := strconv.Unquote(q)
			words, s = append(words, s[:end]+v), s[end+len(q):]
			if s != "" && s[0] != ' ' {
				return nil, fmt.Errorf("info string: a space must follow %s", q)
			}
		}
	}
	return words, nil
}

// step kinds of a page.
const (
	stepFile       = "file"
	stepRun        = "run"
	stepBackground = "background"
	stepOutput     = "output"
)

// step is a block the test acts on.
type step struct {
	block
	kind  string
	file  string // stepFile: the file's name
	exit  int    // stepRun: the expected exit status
	after string // stepRun: what the background process must have printed first
}

// page is a first-worker page as the test runs it.
type page struct {
	path  string
	pools []string // the --pull-pool names of its servo dev command
	steps []step
}

// parsePage reads the marked blocks of a page and checks that they make a
// page the test can run: one servo dev command with its pools, one
// background process, files, commands and the output expected.
func parsePage(path, md string) (page, error) {
	p := page{path: path}
	bs, err := fences(md)
	if err != nil {
		return p, fmt.Errorf("%s: %v", path, err)
	}
	fail := func(b block, format string, args ...any) (page, error) {
		return p, fmt.Errorf("%s:%d: %s", path, b.line, fmt.Sprintf(format, args...))
	}
	stacks, counts := 0, map[string]int{}
	for _, b := range bs {
		run, isRun := b.attrs["run"]
		file, isFile := b.attrs["file"]
		out, isOutput := b.attrs["output"]
		var s step
		switch {
		case !isRun && !isFile && !isOutput:
			continue // prose
		case isRun && run == "stack":
			if len(b.attrs) != 1 {
				return fail(b, "run=stack takes no other attribute")
			}
			pools, err := stackPools(b.text)
			if err != nil {
				return fail(b, "%v", err)
			}
			p.pools = append(p.pools, pools...)
			stacks++
			continue
		case isRun && run == "background":
			if len(b.attrs) != 1 {
				return fail(b, "run=background takes no other attribute")
			}
			s = step{block: b, kind: stepBackground}
		case isRun && run == "":
			s = step{block: b, kind: stepRun}
			for k, v := range b.attrs {
				switch k {
				case "run":
				case "exit":
					n, err := strconv.Atoi(v)
					if err != nil || n < 0 || n > 255 {
						return fail(b, "exit=%q is not an exit status", v)
					}
					s.exit = n
				case "after":
					if v == "" {
						return fail(b, "after= names nothing")
					}
					s.after = v
				default:
					return fail(b, "unknown attribute %q of a run block (exit=N, after=\"TEXT\")", k)
				}
			}
		case isRun:
			return fail(b, "run=%q: want run, run=stack or run=background", run)
		case isFile:
			if len(b.attrs) != 1 || file == "" || strings.Contains(file, "/") || strings.HasPrefix(file, ".") {
				return fail(b, "file=%q: want file=NAME alone, a plain name in the current folder", file)
			}
			s = step{block: b, kind: stepFile, file: file}
		default:
			if len(b.attrs) != 1 || out != "background" {
				return fail(b, "want output=background alone")
			}
			s = step{block: b, kind: stepOutput}
		}
		if strings.TrimSpace(b.text) == "" {
			return fail(b, "an empty %s block", s.kind)
		}
		counts[s.kind]++
		p.steps = append(p.steps, s)
	}
	switch {
	case stacks != 1 || len(p.pools) != 1:
		return p, fmt.Errorf("%s: want one run=stack block naming one --pull-pool, have %d blocks and pools %v", path, stacks, p.pools)
	case counts[stepBackground] != 1:
		return p, fmt.Errorf("%s: want one run=background block (the worker), have %d", path, counts[stepBackground])
	case counts[stepFile] == 0 || counts[stepRun] == 0 || counts[stepOutput] == 0:
		return p, fmt.Errorf("%s: want file, run and output=background blocks, have %v", path, counts)
	}
	return p, nil
}

// stackPools checks a run=stack block (`go install ./cmd/servo`, then
// `servo dev` or `go run ./cmd/servo dev` with flags the test's stack
// does what they say) and returns its pull pools.
func stackPools(text string) ([]string, error) {
	var pools []string
	dev := 0
	for _, l := range strings.Split(strings.ReplaceAll(text, "\\\n", " "), "\n") {
		if i := strings.Index(l, "#"); i >= 0 {
			l = l[:i]
		}
		f := strings.Fields(l)
		switch {
		case len(f) == 0:
		case startsWith(f, "go", "install", "./cmd/servo") || startsWith(f, "cd"):
		case len(f) >= 2 && f[0] == "servo" && f[1] == "dev", len(f) >= 4 && startsWith(f[:4], "go", "run", "./cmd/servo", "dev"):
			dev++
			args := f[2:]
			if f[0] == "go" {
				args = f[4:]
			}
			for i := 0; i < len(args); i++ {
				a := args[i]
				switch {
				case a == "--no-demo":
				case a == "--pull-pool" && i+1 < len(args):
					i++
					pools = append(pools, args[i])
				case strings.HasPrefix(a, "--pull-pool="):
					pools = append(pools, strings.TrimPrefix(a, "--pull-pool="))
				default:
					return nil, fmt.Errorf("servo dev %s: the test's stack does not do what this flag does (it knows --no-demo and --pull-pool NAME)", a)
				}
			}
		default:
			return nil, fmt.Errorf("%q: a run=stack block holds go install ./cmd/servo, cd and servo dev only", strings.Join(f, " "))
		}
	}
	if dev != 1 {
		return nil, fmt.Errorf("want one servo dev command, have %d", dev)
	}
	for _, p := range pools {
		if strings.Contains(p, "=") {
			return nil, fmt.Errorf("--pull-pool %s: the test's stack lets any caller claim", p)
		}
	}
	return pools, nil
}

// startsWith reports whether f starts with want.
func startsWith(f []string, want ...string) bool {
	if len(f) < len(want) {
		return false
	}
	for i, w := range want {
		if f[i] != w {
			return false
		}
	}
	return true
}

// pattern is the regular expression of a page's TEXT: literal, with "…"
// (or "...") matching anything. It is valid as Go's RE2 and as POSIX ERE
// (grep -E).
func pattern(text string) string {
	parts := regexp.MustCompile(`…|\.\.\.`).Split(text, -1)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return strings.Join(parts, ".*")
}

// shellQuote quotes s for bash.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Script variables and limits.
const (
	bgLog       = "DOCPAGES_BG_LOG" // the background process's output file
	afterWait   = 240               // seconds a run block waits for its after= text
	stopTimeout = 60                // seconds the background process has to stop after Ctrl-C
)

// script is the bash script that runs a page: its blocks in order, every
// occurrence of 127.0.0.1:8080 replaced by addr. The background process's
// output goes to $DOCPAGES_BG_LOG; the script stops it (SIGINT to its
// process group, as Ctrl-C does) when it ends, and fails if it does not stop
// within stopTimeout or stops with a status other than 0.
func (p page) script(addr string) (string, error) {
	sub := func(s string) string { return strings.ReplaceAll(s, "127.0.0.1:8080", addr) }
	var b strings.Builder
	fmt.Fprintf(&b, `set -eo pipefail
docpages_bg=
docpages_stop() {
  [ -n "$docpages_bg" ] || return 0
  local pid=$docpages_bg status=0; docpages_bg=
  kill -INT -- -$pid 2>/dev/null || true
  set -m # the watchdog in a process group of its own, its sleep with it
  ( sleep %[2]d; kill -KILL -- -$pid ) > /dev/null 2>&1 < /dev/null & local watchdog=$!
  set +m
  wait $pid || status=$?
  kill -- -$watchdog 2>/dev/null || true; wait $watchdog 2>/dev/null || true
  if [ $status -eq 137 ]; then
    echo "### [${SECONDS}s] the background process did not stop within %[2]d s of Ctrl-C: killed"
  else
    echo "### [${SECONDS}s] the background process stopped on Ctrl-C with status $status"
  fi
  return $status
}
trap 'status=$?; docpages_stop || true; exit $status' EXIT
trap 'exit 143' TERM INT
docpages_wait() { # ERE, what
  local deadline=$((SECONDS + %[1]d))
  until grep -qE -- "$1" "$%[3]s" 2>/dev/null; do
    if [ -z "$docpages_bg" ] || ! kill -0 "$docpages_bg" 2>/dev/null; then
      echo "### the background process is not running: it never printed $2" >&2; exit 98
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "### waited %[1]d s for the background process to print $2" >&2; exit 97
    fi
    sleep 0.2
  done
}
`, afterWait, stopTimeout, bgLog)
	for i, s := range p.steps {
		where := fmt.Sprintf("%s:%d", p.path, s.line)
		switch s.kind {
		case stepFile:
			eof := fmt.Sprintf("DOCPAGES_EOF_%d", i)
			if strings.Contains(s.text, eof) {
				return "", fmt.Errorf("%s: the file holds %s", where, eof)
			}
			fmt.Fprintf(&b, "echo %s\ncat > %s <<'%s'\n%s%s\n", `"### [${SECONDS}s] "`+shellQuote(where+": write "+s.file), shellQuote(s.file), eof, sub(s.text), eof)
		case stepBackground:
			fmt.Fprintf(&b, "echo %s\nset -m\n( %s\n) > \"$%s\" 2>&1 < /dev/null &\ndocpages_bg=$!\nset +m\n",
				`"### [${SECONDS}s] "`+shellQuote(where+": in the background"), sub(s.text), bgLog)
		case stepRun:
			fmt.Fprintf(&b, "echo %s\n", `"### [${SECONDS}s] "`+shellQuote(where))
			if s.after != "" {
				fmt.Fprintf(&b, "docpages_wait %s %s\n", shellQuote(pattern(sub(s.after))), shellQuote(strconv.Quote(s.after)))
			}
			if s.exit == 0 {
				fmt.Fprintf(&b, "%s < /dev/null\n", "{\n"+sub(s.text)+"}")
				continue
			}
			fmt.Fprintf(&b, "set +e\n(\nset -e\n%s) < /dev/null\ndocpages_status=$?\nset -e\n", sub(s.text))
			fmt.Fprintf(&b, "if [ $docpages_status -ne %d ]; then echo %s\"$docpages_status\" >&2; exit 96; fi\n",
				s.exit, shellQuote(fmt.Sprintf("### %s: want exit status %d, have ", where, s.exit)))
		}
	}
	b.WriteString("docpages_stop\necho \"### [${SECONDS}s] done\"\n")
	return b.String(), nil
}

// outputs are the lines the background process must print, in order.
func (p page) outputs(addr string) []string {
	var out []string
	for _, s := range p.steps {
		if s.kind != stepOutput {
			continue
		}
		for _, l := range strings.Split(strings.TrimRight(s.text, "\n"), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, strings.ReplaceAll(l, "127.0.0.1:8080", addr))
			}
		}
	}
	return out
}

// missingOutput returns the first of want that does not match a line of
// log after the line the one before it matched, or "".
func missingOutput(log string, want []string) string {
	lines := strings.Split(log, "\n")
	at := 0
next:
	for _, w := range want {
		re := regexp.MustCompile(pattern(w))
		for ; at < len(lines); at++ {
			if re.MatchString(lines[at]) {
				at++
				continue next
			}
		}
		return w
	}
	return ""
}

func TestParsePage(t *testing.T) {
	const md = "# A page\n\n" +
		"```sh run=stack\ngo install ./cmd/servo   # servo on the PATH\nservo dev --no-demo \\\n    --pull-pool p1\n```\n\n" +
		"```sh\nnot run: prose\n```\n\n" +
		"```sh run\nmkdir a && cd a\n```\n\n" +
		"````go file=main.go\npackage main\n```\n````\n\n" +
		"```sh run=background\ngo run .\n```\n\n" +
		"```sh run after=\"item 1 of 600\" exit=5\nservo watch $T\n```\n\n" +
		"```text output=background\ntask_… attempt 1: items 0 to 6\n\nstopped\n```\n"
	p, err := parsePage("p.md", md)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.pools) != 1 || p.pools[0] != "p1" {
		t.Errorf("pools %v, want [p1]", p.pools)
	}
	var kinds []string
	for _, s := range p.steps {
		kinds = append(kinds, s.kind)
	}
	if got := strings.Join(kinds, " "); got != "run file background run output" {
		t.Errorf("steps %q", got)
	}
	if s := p.steps[1]; s.file != "main.go" || s.text != "package main\n```\n" {
		t.Errorf("file step %+v", s)
	}
	if s := p.steps[3]; s.exit != 5 || s.after != "item 1 of 600" || s.text != "servo watch $T\n" {
		t.Errorf("run step %+v", s)
	}
	if got := p.outputs("h:1"); strings.Join(got, "|") != "task_… attempt 1: items 0 to 6|stopped" {
		t.Errorf("outputs %q", got)
	}
	log := "x\ntask_01AB attempt 1: items 0 to 6\nnoise\nworker stopped\n"
	if m := missingOutput(log, p.outputs("")); m != "" {
		t.Errorf("missingOutput: %q", m)
	}
	if m := missingOutput(log, []string{"stopped", "task_… attempt 1"}); m != "task_… attempt 1" {
		t.Errorf("missingOutput out of order: %q", m)
	}
	if _, err := p.script("127.0.0.1:1"); err != nil {
		t.Error(err)
	}
	for name, bad := range map[string]string{
		"unknown attribute": strings.Replace(md, "exit=5", "exits=5", 1),
		"unknown dev flag":  strings.Replace(md, "--no-demo", "--no-sweeper", 1),
		"two pools":         strings.Replace(md, "--pull-pool p1", "--pull-pool p1 --pull-pool p2", 1),
		"no background":     strings.Replace(md, "run=background", "run=foreground", 1),
		"no output":         strings.Replace(md, "output=background", "", 1),
		"file in a folder":  strings.Replace(md, "file=main.go", "file=cmd/main.go", 1),
		"unclosed":          md + "```sh run\nls\n",
	} {
		if _, err := parsePage("p.md", bad); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	if got := pattern("a.b … c(d)"); !regexp.MustCompile("^"+got+"$").MatchString("a.b x y c(d)") || regexp.MustCompile(got).MatchString("aXb c(d)") {
		t.Errorf("pattern %q", got)
	}
}
