package dispatcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/servo-dev/servo/api"
)

// readBody checks the content type and reads the body under limit. With
// optional, an empty body (no Content-Type needed) is accepted and
// returned as nil.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, optional bool) ([]byte, *apiError) {
	if optional && r.ContentLength == 0 {
		return nil, nil
	}
	if e := checkContentType(r); e != nil {
		if optional && r.Header.Get("Content-Type") == "" {
			// A chunked body without a content type: only an empty one is fine.
			body, err := io.ReadAll(io.LimitReader(r.Body, 1))
			if err == nil && len(body) == 0 {
				return nil, nil
			}
		}
		return nil, e
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, tooLarge("", limit, "the request body")
		}
		return nil, invalid("body", "could not read the request body: %v", err)
	}
	if len(body) == 0 && !optional {
		return nil, invalid("body", "a JSON object is required")
	}
	if len(body) == 0 {
		return nil, nil
	}
	return body, nil
}

// checkContentType accepts application/json with an optional utf-8 charset.
func checkContentType(r *http.Request) *apiError {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") || strings.EqualFold(cs, "utf8") {
			return nil
		}
	}
	if ct == "" {
		ct = "none"
	}
	return &apiError{status: http.StatusUnsupportedMediaType, body: api.Error{Code: api.CodeUnsupportedMediaType,
		Message: fmt.Sprintf("Content-Type must be application/json (got %s)", ct)}}
}

// decodeObject decodes the JSON object raw into dst (a pointer to a
// struct). Unknown fields, at any depth, and values of the wrong type are
// invalid_request naming the field, with prefix prepended ("tasks[3].").
func decodeObject(raw []byte, dst any, prefix string) *apiError {
	if e := checkFields(raw, reflect.TypeOf(dst).Elem(), prefix); e != nil {
		return e
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := te.Field
			if field == "" {
				field = strings.TrimSuffix(prefix, ".")
			} else {
				field = prefix + field
			}
			return invalid(orBody(field), "must be %s, not %s", describeType(te.Type), te.Value)
		}
		return invalid(orBody(strings.TrimSuffix(prefix, ".")), "is not valid JSON: %v", err)
	}
	return nil
}

func orBody(field string) string {
	if field == "" {
		return "body"
	}
	return field
}

// checkFields rejects keys of the object raw that typ has no JSON field for.
func checkFields(raw []byte, typ reflect.Type, prefix string) *apiError {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return invalid(orBody(strings.TrimSuffix(prefix, ".")), "is not valid JSON: %v", err)
		}
		return invalid(orBody(strings.TrimSuffix(prefix, ".")), "must be a JSON object")
	}
	fields := jsonFields(typ)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		ft, ok := fields[k]
		if !ok {
			if k == "" {
				// A field has a name: the object itself is at fault.
				return invalid(orBody(strings.TrimSuffix(prefix, ".")), "has a member with an empty name, which is not a known field")
			}
			return invalid(prefix+k, "is not a known field")
		}
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if string(m[k]) == "null" {
			continue
		}
		var e *apiError
		switch ft.Kind() {
		case reflect.Struct:
			e = checkFields(m[k], ft, prefix+k+".")
		case reflect.Map:
			e = checkMapFields(m[k], ft, prefix+k+".")
		}
		if e != nil {
			return e
		}
	}
	return nil
}

// checkMapFields applies checkFields to each value of the object raw, a
// map of typ whose values are structs (retry.byCategory); other maps are
// left to json.Unmarshal.
func checkMapFields(raw []byte, typ reflect.Type, prefix string) *apiError {
	vt := typ.Elem()
	for vt.Kind() == reflect.Pointer {
		vt = vt.Elem()
	}
	if vt.Kind() != reflect.Struct {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil // not an object: Unmarshal names the type error
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if string(m[k]) == "null" {
			continue
		}
		if e := checkFields(m[k], vt, prefix+k+"."); e != nil {
			return e
		}
	}
	return nil
}

// jsonFields maps the JSON names of a struct's fields to their types.
func jsonFields(typ reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type, typ.NumField())
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func describeType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a " + t.String()
}

// checkText validates a caller-supplied string: valid UTF-8, no control
// characters, at most max bytes, and present when required.
func checkText(field, v string, required bool, max int) *apiError {
	switch {
	case v == "" && required:
		return invalid(field, "is required")
	case len(v) > max:
		return invalid(field, "must be at most %d bytes", max)
	case !utf8.ValidString(v):
		return invalid(field, "must be valid UTF-8")
	case strings.ContainsFunc(v, unicode.IsControl):
		return invalid(field, "must not contain control characters")
	}
	return nil
}
