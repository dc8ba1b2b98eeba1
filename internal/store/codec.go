package store

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// The codec maps Servo's structs to Firestore values by their `firestore`
// tags, the way cloud.google.com/go/firestore does for the types Servo uses
// (strings, integers, floats, booleans, time.Time, pointers, []byte and
// json.RawMessage as bytes, structs and maps as maps, slices as arrays).
// Servo talks to Firestore's low-level API so that a transaction can begin
// on its first read; this codec is what that costs.

var (
	timeType  = reflect.TypeOf(time.Time{})
	bytesType = reflect.TypeOf([]byte(nil))
	rawType   = reflect.TypeOf(json.RawMessage(nil))
	// apiPkg and taskPkg hold the domain types, which carry no firestore
	// tags: the codec maps them only through their document types.
	apiPkg  = reflect.TypeFor[api.Timing]().PkgPath()
	taskPkg = reflect.TypeFor[task.Task]().PkgPath()
)

func fieldName(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	tag := f.Tag.Get("firestore")
	if tag == "-" {
		return "", false
	}
	name, _, _ := strings.Cut(tag, ",")
	if name == "" {
		name = f.Name
	}
	return name, true
}

// structField is a struct field the codec maps: its index and name.
type structField struct {
	index int
	name  string
}

// fieldsCache maps a struct type to its mapped fields (reflect.Type →
// []structField): tags are parsed once per type, not on every encode.
var fieldsCache sync.Map

// fieldsOf returns the mapped fields of struct type t, in order.
func fieldsOf(t reflect.Type) []structField {
	if fs, ok := fieldsCache.Load(t); ok {
		return fs.([]structField)
	}
	if p := t.PkgPath(); p == apiPkg || p == taskPkg {
		// Stored only through its document type (docs.go).
		panic(fmt.Sprintf("store: %s has no stored form here: encode or decode its document type", t))
	}
	var fs []structField
	for i := range t.NumField() {
		if name, ok := fieldName(t.Field(i)); ok {
			fs = append(fs, structField{index: i, name: name})
		}
	}
	fieldsCache.Store(t, fs)
	return fs
}

// encodeFields encodes a struct (or pointer to one) as document fields; a
// domain value (task.Task, task.Attempt, ...) as its document type
// (storedForm, docs.go).
func encodeFields(v any) map[string]*pb.Value {
	rv := reflect.Indirect(reflect.ValueOf(storedForm(v)))
	return encodeValue(rv).GetMapValue().GetFields()
}

func encodeValue(v reflect.Value) *pb.Value {
	null := &pb.Value{ValueType: &pb.Value_NullValue{}}
	if v.Type() == timeType {
		return &pb.Value{ValueType: &pb.Value_TimestampValue{TimestampValue: timestamppb.New(v.Interface().(time.Time))}}
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return null
		}
		return encodeValue(v.Elem())
	case reflect.String:
		return &pb.Value{ValueType: &pb.Value_StringValue{StringValue: v.String()}}
	case reflect.Bool:
		return &pb.Value{ValueType: &pb.Value_BooleanValue{BooleanValue: v.Bool()}}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &pb.Value{ValueType: &pb.Value_IntegerValue{IntegerValue: v.Int()}}
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return &pb.Value{ValueType: &pb.Value_IntegerValue{IntegerValue: int64(v.Uint())}}
	case reflect.Float32, reflect.Float64:
		return &pb.Value{ValueType: &pb.Value_DoubleValue{DoubleValue: v.Float()}}
	case reflect.Slice:
		if v.IsNil() {
			return null
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return &pb.Value{ValueType: &pb.Value_BytesValue{BytesValue: v.Bytes()}}
		}
		vals := make([]*pb.Value, v.Len())
		for i := range vals {
			vals[i] = encodeValue(v.Index(i))
		}
		return &pb.Value{ValueType: &pb.Value_ArrayValue{ArrayValue: &pb.ArrayValue{Values: vals}}}
	case reflect.Map:
		if v.IsNil() {
			return null
		}
		fields := make(map[string]*pb.Value, v.Len())
		it := v.MapRange()
		for it.Next() {
			fields[it.Key().String()] = encodeValue(it.Value())
		}
		return &pb.Value{ValueType: &pb.Value_MapValue{MapValue: &pb.MapValue{Fields: fields}}}
	case reflect.Struct:
		fs := fieldsOf(v.Type())
		fields := make(map[string]*pb.Value, len(fs))
		for _, f := range fs {
			fields[f.name] = encodeValue(v.Field(f.index))
		}
		return &pb.Value{ValueType: &pb.Value_MapValue{MapValue: &pb.MapValue{Fields: fields}}}
	}
	panic(fmt.Sprintf("store: cannot encode %s", v.Type()))
}

// decodeFields decodes document fields into the struct out points to.
// Fields the document lacks keep their zero value. A domain value is
// decoded through its document type (decodeStored, docs.go).
func decodeFields(fields map[string]*pb.Value, out any) error {
	if ok, err := decodeStored(fields, out); ok {
		return err
	}
	rv := reflect.ValueOf(out)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("store: decode into %T: need a pointer to a struct", out)
	}
	return decodeMap(fields, rv.Elem())
}

func decodeMap(fields map[string]*pb.Value, v reflect.Value) error {
	for _, f := range fieldsOf(v.Type()) {
		if fv, ok := fields[f.name]; ok {
			if err := decodeValue(fv, v.Field(f.index)); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
		}
	}
	return nil
}

func decodeValue(pv *pb.Value, v reflect.Value) error {
	if _, isNull := pv.GetValueType().(*pb.Value_NullValue); isNull || pv.GetValueType() == nil {
		v.Set(reflect.Zero(v.Type()))
		return nil
	}
	if v.Type() == timeType {
		ts, ok := pv.GetValueType().(*pb.Value_TimestampValue)
		if !ok {
			return fmt.Errorf("want timestamp, got %T", pv.GetValueType())
		}
		v.Set(reflect.ValueOf(ts.TimestampValue.AsTime()))
		return nil
	}
	mismatch := func() error { return fmt.Errorf("cannot decode %T into %s", pv.GetValueType(), v.Type()) }
	switch v.Kind() {
	case reflect.Pointer:
		e := reflect.New(v.Type().Elem())
		if err := decodeValue(pv, e.Elem()); err != nil {
			return err
		}
		v.Set(e)
	case reflect.String:
		s, ok := pv.GetValueType().(*pb.Value_StringValue)
		if !ok {
			return mismatch()
		}
		v.SetString(s.StringValue)
	case reflect.Bool:
		b, ok := pv.GetValueType().(*pb.Value_BooleanValue)
		if !ok {
			return mismatch()
		}
		v.SetBool(b.BooleanValue)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := pv.GetValueType().(*pb.Value_IntegerValue)
		if !ok {
			return mismatch()
		}
		v.SetInt(n.IntegerValue)
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		n, ok := pv.GetValueType().(*pb.Value_IntegerValue)
		if !ok {
			return mismatch()
		}
		v.SetUint(uint64(n.IntegerValue))
	case reflect.Float32, reflect.Float64:
		switch n := pv.GetValueType().(type) {
		case *pb.Value_DoubleValue:
			v.SetFloat(n.DoubleValue)
		case *pb.Value_IntegerValue:
			v.SetFloat(float64(n.IntegerValue))
		default:
			return mismatch()
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			b, ok := pv.GetValueType().(*pb.Value_BytesValue)
			if !ok {
				return mismatch()
			}
			v.SetBytes(append([]byte(nil), b.BytesValue...))
			return nil
		}
		a, ok := pv.GetValueType().(*pb.Value_ArrayValue)
		if !ok {
			return mismatch()
		}
		s := reflect.MakeSlice(v.Type(), len(a.ArrayValue.GetValues()), len(a.ArrayValue.GetValues()))
		for i, ev := range a.ArrayValue.GetValues() {
			if err := decodeValue(ev, s.Index(i)); err != nil {
				return err
			}
		}
		v.Set(s)
	case reflect.Map:
		m, ok := pv.GetValueType().(*pb.Value_MapValue)
		if !ok {
			return mismatch()
		}
		out := reflect.MakeMapWithSize(v.Type(), len(m.MapValue.GetFields()))
		for k, ev := range m.MapValue.GetFields() {
			e := reflect.New(v.Type().Elem()).Elem()
			if err := decodeValue(ev, e); err != nil {
				return err
			}
			out.SetMapIndex(reflect.ValueOf(k).Convert(v.Type().Key()), e)
		}
		v.Set(out)
	case reflect.Struct:
		m, ok := pv.GetValueType().(*pb.Value_MapValue)
		if !ok {
			return mismatch()
		}
		return decodeMap(m.MapValue.GetFields(), v)
	default:
		return mismatch()
	}
	return nil
}
