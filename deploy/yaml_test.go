package deploy

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// go.mod has no YAML library, so cloudbuild.yaml is parsed by parseYAML: a
// strict parser for the block-style subset the file uses. It returns
// map[string]any, []any and string (every scalar stays a string) and refuses
// whatever it does not understand (flow collections, anchors, aliases,
// tags, folded scalars, tabs, multi-line plain scalars, duplicate keys), so
// the checks never run on a misread file.

type yamlLine struct {
	no     int    // 1-based line number
	indent int    // leading spaces
	text   string // without the indentation
}

type yamlParser struct {
	lines []yamlLine // content lines; blank and comment-only lines dropped
	raw   []string   // every line, for block scalars
	pos   int
}

func parseYAML(src string) (any, error) {
	p := &yamlParser{raw: strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n")}
	for i, l := range p.raw {
		trimmed := strings.TrimLeft(l, " ")
		if strings.HasPrefix(trimmed, "\t") {
			return nil, fmt.Errorf("line %d: tab in indentation", i+1)
		}
		if t := strings.TrimSpace(trimmed); t == "" || strings.HasPrefix(t, "#") || (t == "---" && len(p.lines) == 0) {
			continue
		}
		p.lines = append(p.lines, yamlLine{no: i + 1, indent: len(l) - len(trimmed), text: strings.TrimRight(trimmed, " ")})
	}
	if len(p.lines) == 0 {
		return nil, fmt.Errorf("empty document")
	}
	v, err := p.node(p.lines[0].indent)
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.lines) {
		return nil, fmt.Errorf("line %d: unexpected indentation", p.lines[p.pos].no)
	}
	return v, nil
}

// node parses the collection starting at the current line, which is at
// indent.
func (p *yamlParser) node(indent int) (any, error) {
	l := p.lines[p.pos]
	if l.indent != indent {
		return nil, fmt.Errorf("line %d: bad indentation", l.no)
	}
	if l.text == "-" || strings.HasPrefix(l.text, "- ") {
		return p.sequence(indent)
	}
	if _, _, ok := splitKey(l.text); ok {
		return p.mapping(indent)
	}
	return nil, fmt.Errorf("line %d: a plain scalar cannot stand alone or span lines: %q", l.no, l.text)
}

func (p *yamlParser) mapping(indent int) (any, error) {
	m := map[string]any{}
	for p.pos < len(p.lines) && p.lines[p.pos].indent == indent {
		l := p.lines[p.pos]
		key, rest, ok := splitKey(l.text)
		if !ok {
			return nil, fmt.Errorf("line %d: want \"key: value\", got %q", l.no, l.text)
		}
		k, err := scalar(key, l.no)
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("line %d: duplicate key %q", l.no, k)
		}
		p.pos++
		v, err := p.value(rest, indent, l.no, true)
		if err != nil {
			return nil, err
		}
		m[k] = v
	}
	return m, nil
}

func (p *yamlParser) sequence(indent int) (any, error) {
	var s []any
	for p.pos < len(p.lines) && p.lines[p.pos].indent == indent {
		l := p.lines[p.pos]
		if l.text != "-" && !strings.HasPrefix(l.text, "- ") {
			break // e.g. the next key of a mapping whose value this sequence is
		}
		rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		if _, _, isMap := splitKey(rest); isMap && rest != "" && !isQuoted(rest) {
			// "- key: value" starts a mapping indented to where key is.
			p.lines[p.pos] = yamlLine{no: l.no, indent: indent + len(l.text) - len(rest), text: rest}
			v, err := p.mapping(p.lines[p.pos].indent)
			if err != nil {
				return nil, err
			}
			s = append(s, v)
			continue
		}
		p.pos++
		v, err := p.value(rest, indent, l.no, false)
		if err != nil {
			return nil, err
		}
		s = append(s, v)
	}
	return s, nil
}

// value parses what follows "key:" or "- " on line no: an inline scalar, a
// block scalar, or a nested collection on the next lines. A mapping value
// may be a sequence at the mapping's own indent.
func (p *yamlParser) value(rest string, indent, no int, inMapping bool) (any, error) {
	switch {
	case rest == "|" || rest == "|-":
		return p.blockScalar(indent, rest == "|"), nil
	case rest != "":
		return scalar(rest, no)
	case p.pos < len(p.lines) && p.lines[p.pos].indent > indent:
		return p.node(p.lines[p.pos].indent)
	case inMapping && p.pos < len(p.lines) && p.lines[p.pos].indent == indent && strings.HasPrefix(p.lines[p.pos].text, "- "):
		return p.sequence(indent)
	}
	return "", nil // "key:" with nothing: null, kept as ""
}

// blockScalar reads a literal block scalar: the raw lines after the
// current content line's predecessor that are indented deeper than indent
// (and blank lines among them), with their common indentation removed.
func (p *yamlParser) blockScalar(indent int, keepNewline bool) string {
	start := p.lines[p.pos-1].no // the line with "|"; raw index of the next line
	end := len(p.raw)
	if p.pos < len(p.lines) {
		for p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
			p.pos++
		}
		if p.pos < len(p.lines) {
			end = p.lines[p.pos].no - 1
		}
	}
	body := p.raw[start:end]
	for len(body) > 0 && strings.TrimSpace(body[len(body)-1]) == "" {
		body = body[:len(body)-1]
	}
	cut := -1
	for _, l := range body {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " ")); cut < 0 || n < cut {
			cut = n
		}
	}
	out := make([]string, len(body))
	for i, l := range body {
		if len(l) >= cut && cut >= 0 {
			out[i] = l[cut:]
		}
	}
	s := strings.Join(out, "\n")
	if keepNewline && s != "" {
		s += "\n"
	}
	return s
}

// splitKey splits "key: rest" or "key:" outside quotes.
func splitKey(text string) (key, rest string, ok bool) {
	if isQuoted(text) {
		q := text[0]
		end := strings.IndexByte(text[1:], q)
		if end < 0 {
			return "", "", false
		}
		after := text[end+2:]
		if after == ":" || strings.HasPrefix(after, ": ") {
			return text[:end+2], strings.TrimSpace(strings.TrimPrefix(after, ":")), true
		}
		return "", "", false
	}
	if i := strings.Index(text, ": "); i >= 0 {
		return text[:i], strings.TrimSpace(text[i+2:]), true
	}
	if strings.HasSuffix(text, ":") {
		return strings.TrimSuffix(text, ":"), "", true
	}
	return "", "", false
}

func isQuoted(s string) bool { return s != "" && (s[0] == '"' || s[0] == '\'') }

// scalar decodes an inline scalar: plain (a trailing " #" comment removed),
// 'single' or "double" quoted.
func scalar(s string, no int) (string, error) {
	if s == "" {
		return "", nil
	}
	switch s[0] {
	case '[', '{':
		return "", fmt.Errorf("line %d: flow collections are not supported: %q", no, s)
	case '&', '*', '!', '>', '|', '%', '@', '`':
		return "", fmt.Errorf("line %d: unsupported YAML syntax: %q", no, s)
	case '\'':
		end := -1
		for i := 1; i < len(s); i++ {
			if s[i] == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					i++
					continue
				}
				end = i
				break
			}
		}
		if end < 0 || strings.TrimSpace(stripComment(s[end+1:])) != "" {
			return "", fmt.Errorf("line %d: bad single-quoted scalar %q", no, s)
		}
		return strings.ReplaceAll(s[1:end], "''", "'"), nil
	case '"':
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			c := s[i]
			switch {
			case c == '"':
				if strings.TrimSpace(stripComment(s[i+1:])) != "" {
					return "", fmt.Errorf("line %d: text after a quoted scalar: %q", no, s)
				}
				return b.String(), nil
			case c == '\\' && i+1 < len(s):
				i++
				esc, ok := map[byte]string{'"': `"`, '\\': `\`, 'n': "\n", 't': "\t", '/': "/"}[s[i]]
				if !ok {
					return "", fmt.Errorf("line %d: unsupported escape in %q", no, s)
				}
				b.WriteString(esc)
			default:
				b.WriteByte(c)
			}
		}
		return "", fmt.Errorf("line %d: unterminated double-quoted scalar %q", no, s)
	}
	return strings.TrimSpace(stripComment(s)), nil
}

// stripComment removes a " #" comment from a plain scalar.
func stripComment(s string) string {
	if strings.HasPrefix(s, "#") {
		return ""
	}
	if i := strings.Index(s, " #"); i >= 0 {
		return s[:i]
	}
	return s
}

// TestYAMLSubsetParser keeps the parser honest, since the cloudbuild
// checks are only as good as it is.
func TestYAMLSubsetParser(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      any
	}{
		{"mapping", "a: 1\nb: two # comment\n", map[string]any{"a": "1", "b": "two"}},
		{"quoted", "a: \"x: y\"\nb: 'it''s'\n\"c\": \"\"\n", map[string]any{"a": "x: y", "b": "it's", "c": ""}},
		{"nested", "a:\n  b:\n    c: d\n", map[string]any{"a": map[string]any{"b": map[string]any{"c": "d"}}}},
		{"sequence of maps", "steps:\n  - id: one\n    args:\n      - \"-c\"\n      - echo $$HOME\n  - id: two\n",
			map[string]any{"steps": []any{
				map[string]any{"id": "one", "args": []any{"-c", "echo $$HOME"}},
				map[string]any{"id": "two"},
			}}},
		{"sequence at mapping indent", "a:\n- x\n- y\nb: z\n", map[string]any{"a": []any{"x", "y"}, "b": "z"}},
		{"block scalar", "s: |\n  line 1\n\n    indented # not a comment\nt: u\n",
			map[string]any{"s": "line 1\n\n  indented # not a comment\n", "t": "u"}},
		{"block scalar in sequence", "- |-\n  a\n  b\n- c\n", []any{"a\nb", "c"}},
		{"plain with colon", "- PATH=/a:/b\n- -var=m={k=\"v\"}\n", []any{"PATH=/a:/b", "-var=m={k=\"v\"}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseYAML(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v\nwant %#v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct{ name, src string }{
		{"flow sequence", "a: [1, 2]\n"},
		{"flow mapping", "a: {b: c}\n"},
		{"anchor", "a: &x 1\n"},
		{"alias", "a: *x\n"},
		{"folded", "a: >\n  b\n"},
		{"duplicate key", "a: 1\na: 2\n"},
		{"tab", "a:\n\tb: c\n"},
		{"multi-line plain", "a:\n  just text\n  more\n"},
		{"bad indent", "a: 1\n   b: 2\n"},
		{"unterminated", "a: \"x\n"},
	} {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			if v, err := parseYAML(tc.src); err == nil {
				t.Errorf("parsed %q as %#v; want an error", tc.src, v)
			}
		})
	}
}
