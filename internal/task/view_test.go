package task

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

// The API shows an attempt exactly as the stored record's JSON: every
// field of task.Attempt that has a JSON name is in api.Attempt, with the
// same value. A field added to one and not the other fails here.
func TestAttemptView(t *testing.T) {
	var a Attempt
	fill(reflect.ValueOf(&a).Elem())
	stored, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	shown, err := json.Marshal(a.View())
	if err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	if err := json.Unmarshal(stored, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(shown, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("api.Attempt shows\n%s\nthe stored attempt's JSON is\n%s", shown, stored)
	}
	if len(want) < 15 {
		t.Fatalf("only %d fields filled: %s", len(want), stored)
	}
	var v api.Attempt
	if err := json.Unmarshal(stored, &v); err != nil || !reflect.DeepEqual(v, a.View()) {
		t.Fatalf("the stored JSON does not decode to the view: %v", err)
	}
}

// fill sets every field of v to a non-zero value.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 { // json.RawMessage, []byte
			v.SetBytes([]byte(`{"k":1}`))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Float64:
		v.SetFloat(1.5)
	}
}
