package openapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/servo-dev/servo/internal/openapi"
)

var update = flag.Bool("update", false, "rewrite openapi.json from docs/openapi.yaml (go generate)")

// source is the document's source, from this package's directory.
const source = "../../docs/openapi.yaml"

// The embedded openapi.json is docs/openapi.yaml as JSON, byte for byte;
// -update (go generate ./internal/openapi) rewrites it.
func TestJSONIsTheDocument(t *testing.T) {
	src, err := os.ReadFile(source)
	if err != nil {
		t.Fatal(err)
	}
	want, err := yamlToJSON(src)
	if err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	if *update {
		if err := os.WriteFile("openapi.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(openapi.JSON(), want) {
		t.Fatal("internal/openapi/openapi.json is not docs/openapi.yaml as JSON: run go generate ./internal/openapi")
	}
}

func TestYAMLToJSON(t *testing.T) {
	for _, c := range []struct {
		name, in, want, err string
	}{
		{name: "keys keep their order", in: "b: 1\na: [x, 'y', 2.5, true, null]\n", want: `{"b":1,"a":["x","y",2.5,true,null]}`},
		{name: "quoted numbers and times are strings", in: "'200': {v: 3.1.0, at: 2030-01-15T12:00:00Z}\n", want: `{"200":{"v":"3.1.0","at":"2030-01-15T12:00:00Z"}}`},
		{name: "block text", in: "d: |\n  a <b> & c\n", want: `{"d":"a <b> & c\n"}`},
		{name: "anchors", in: "a: &x {k: 1}\nb: *x\n", want: `{"a":{"k":1},"b":{"k":1}}`},
		{name: "a repeated key", in: "a: 1\na: 2\n", err: `line 2: key "a" repeated`},
		{name: "a merge key", in: "a: &x {k: 1}\nb: {<<: *x}\n", err: "line 2: merge keys are not supported"},
		{name: "two documents", in: "a: 1\n---\nb: 2\n", err: "one YAML document"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := yamlToJSON([]byte(c.in))
			if c.err != "" {
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.err)) {
					t.Fatalf("got %v, want an error with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, got); err != nil {
				t.Fatal(err)
			}
			if compact.String() != c.want {
				t.Errorf("got %s, want %s", compact.String(), c.want)
			}
		})
	}
}

// yamlToJSON converts a YAML document to indented JSON, keeping the order
// of mapping keys. A repeated key or a merge key is an error.
func yamlToJSON(src []byte) ([]byte, error) {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var n yaml.Node
	if err := dec.Decode(&n); err != nil {
		return nil, err
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, fmt.Errorf("line %d: want one YAML document", extra.Line)
	case !errors.Is(err, io.EOF):
		return nil, err
	}
	var b bytes.Buffer
	if err := writeNode(&b, &n); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

func writeNode(b *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return errors.New("an empty YAML document")
		}
		return writeNode(b, n.Content[0])
	case yaml.AliasNode:
		return writeNode(b, n.Alias)
	case yaml.MappingNode:
		b.WriteByte('{')
		seen := map[string]bool{}
		for i := 0; i < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			switch {
			case k.Kind != yaml.ScalarNode:
				return fmt.Errorf("line %d: a key must be a scalar", k.Line)
			case k.ShortTag() == "!!merge":
				return fmt.Errorf("line %d: merge keys are not supported", k.Line)
			case seen[k.Value]:
				return fmt.Errorf("line %d: key %q repeated", k.Line, k.Value)
			}
			seen[k.Value] = true
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeScalar(b, k.Value); err != nil {
				return err
			}
			b.WriteByte(':')
			if err := writeNode(b, v); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeNode(b, c); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		var v any
		switch n.ShortTag() {
		case "!!str", "!!timestamp", "!!binary":
			v = n.Value
		case "!!null":
		case "!!bool", "!!int", "!!float":
			if err := n.Decode(&v); err != nil {
				return fmt.Errorf("line %d: %w", n.Line, err)
			}
		default:
			return fmt.Errorf("line %d: unsupported tag %s", n.Line, n.ShortTag())
		}
		if err := writeScalar(b, v); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
	default:
		return fmt.Errorf("line %d: unsupported YAML node", n.Line)
	}
	return nil
}

// writeScalar writes v as JSON, without escaping HTML characters.
func writeScalar(b *bytes.Buffer, v any) error {
	var s bytes.Buffer
	enc := json.NewEncoder(&s)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.Write(bytes.TrimSuffix(s.Bytes(), []byte("\n")))
	return nil
}
