package store

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/protobuf/proto"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// docCase is a domain type and its stored form: toDoc maps a pointer to
// a domain value to its document value, fromDoc a document value back to
// a pointer to a new domain value.
type docCase struct {
	name     string
	domain   reflect.Type
	toDoc    func(any) any
	fromDoc  func(any) any
	unstored []string // domain fields deliberately not stored
}

var docCases = []docCase{
	{
		name: "task.Task", domain: reflect.TypeFor[task.Task](),
		toDoc:    func(v any) any { return taskDocOf(v.(*task.Task)) },
		fromDoc:  func(d any) any { var t task.Task; dd := d.(taskDoc); dd.fill(&t); return &t },
		unstored: []string{"Attempts"}, // records are documents of their own
	},
	{
		name: "task.Attempt", domain: reflect.TypeFor[task.Attempt](),
		toDoc:   func(v any) any { return attemptDocOf(v.(*task.Attempt)) },
		fromDoc: func(d any) any { var a task.Attempt; dd := d.(attemptDoc); dd.fill(&a); return &a },
	},
	{
		name: "task.LiveAttempt", domain: reflect.TypeFor[task.LiveAttempt](),
		toDoc:   func(v any) any { return *(*liveAttemptDoc)(v.(*task.LiveAttempt)) },
		fromDoc: func(d any) any { l := task.LiveAttempt(d.(liveAttemptDoc)); return &l },
	},
	{
		name: "task.Step", domain: reflect.TypeFor[task.Step](),
		toDoc:   func(v any) any { return stepDocsOf([]task.Step{*v.(*task.Step)})[0] },
		fromDoc: func(d any) any { return &stepsOf([]stepDoc{d.(stepDoc)})[0] },
	},
	{
		name: "task.Transition", domain: reflect.TypeFor[task.Transition](),
		toDoc:   func(v any) any { return transitionDocOf(v.(*task.Transition)) },
		fromDoc: func(d any) any { dd := d.(transitionDoc); tr := dd.transition(); return &tr },
	},
	{
		name: "task.QuotaHold", domain: reflect.TypeFor[task.QuotaHold](),
		toDoc:   func(v any) any { return quotaHoldDoc(*v.(*task.QuotaHold)) },
		fromDoc: func(d any) any { h := task.QuotaHold(d.(quotaHoldDoc)); return &h },
	},
	{
		name: "task.Outage", domain: reflect.TypeFor[task.Outage](),
		toDoc:   func(v any) any { return outageSpanDoc(*v.(*task.Outage)) },
		fromDoc: func(d any) any { o := task.Outage(d.(outageSpanDoc)); return &o },
	},
	{
		name: "api.ErrorInfo", domain: reflect.TypeFor[api.ErrorInfo](),
		toDoc:   func(v any) any { return *(*errorInfoDoc)(v.(*api.ErrorInfo)) },
		fromDoc: func(d any) any { e := api.ErrorInfo(d.(errorInfoDoc)); return &e },
	},
	{
		name: "api.Metrics", domain: reflect.TypeFor[api.Metrics](),
		toDoc:   func(v any) any { return *(*metricsDoc)(v.(*api.Metrics)) },
		fromDoc: func(d any) any { m := api.Metrics(d.(metricsDoc)); return &m },
	},
	{
		name: "api.Timing", domain: reflect.TypeFor[api.Timing](),
		toDoc:   func(v any) any { return timingDoc(*v.(*api.Timing)) },
		fromDoc: func(d any) any { t := api.Timing(d.(timingDoc)); return &t },
	},
	{
		name: "api.CategoryRetry", domain: reflect.TypeFor[api.CategoryRetry](),
		toDoc:   func(v any) any { return categoryRetryDoc(*v.(*api.CategoryRetry)) },
		fromDoc: func(d any) any { c := api.CategoryRetry(d.(categoryRetryDoc)); return &c },
	},
	{
		name: "api.SweepStatus", domain: reflect.TypeFor[api.SweepStatus](),
		toDoc:   func(v any) any { return sweepStatusDocOf(v.(*api.SweepStatus)) },
		fromDoc: func(d any) any { var st api.SweepStatus; dd := d.(sweepStatusDoc); dd.fill(&st); return &st },
	},
	{
		name: "api.SweepDuty", domain: reflect.TypeFor[api.SweepDuty](),
		toDoc:   func(v any) any { return sweepDutyDoc(*v.(*api.SweepDuty)) },
		fromDoc: func(d any) any { s := api.SweepDuty(d.(sweepDutyDoc)); return &s },
	},
}

// filler sets every exported field reachable from a value (through
// pointers, slices, maps and nested structs) to a distinct non-zero value.
// With empty, it sets slices, maps and byte strings to empty non-nil ones
// instead, and pointers to zero values: the codec writes an empty array,
// map or bytes for those and null for nil ones, so the mappings must keep
// the difference.
type filler struct {
	n     int
	empty bool
}

func (f *filler) fill(v reflect.Value) {
	f.n++
	if v.Type() == timeType {
		v.Set(reflect.ValueOf(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(f.n)*time.Second + time.Duration(f.n))))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", f.n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(f.n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(f.n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(f.n) + 0.5)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		if !f.empty {
			f.fill(p.Elem())
		}
		v.Set(p)
	case reflect.Slice:
		n := 2
		if f.empty {
			n = 0
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			f.fill(s.Index(i))
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for i := range 2 {
			if f.empty {
				break
			}
			e := reflect.New(v.Type().Elem()).Elem()
			f.fill(e)
			m.SetMapIndex(reflect.ValueOf(fmt.Sprintf("k%d.%d", f.n, i)).Convert(v.Type().Key()), e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i))
			}
		}
	default:
		panic(fmt.Sprintf("filler: %s", v.Type()))
	}
}

// unset lists the paths of the fields reachable from v that hold a zero
// value (a nil pointer, an empty slice or map, a zero leaf).
func unset(v reflect.Value, path string) []string {
	if v.Type() == timeType {
		if v.Interface().(time.Time).IsZero() {
			return []string{path}
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return []string{path}
		}
		return unset(v.Elem(), path)
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			return []string{path}
		}
		if v.Kind() == reflect.Slice {
			return unset(v.Index(0), path+"[0]")
		}
		it := v.MapRange()
		it.Next()
		return unset(it.Value(), path+"["+it.Key().String()+"]")
	case reflect.Struct:
		var out []string
		for i := range v.NumField() {
			out = append(out, unset(v.Field(i), path+"."+v.Type().Field(i).Name)...)
		}
		return out
	}
	if v.IsZero() {
		return []string{path}
	}
	return nil
}

// differing lists the top-level fields of two structs of one type whose
// values differ.
func differing(a, b reflect.Value) []string {
	var out []string
	for i := range a.NumField() {
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			out = append(out, a.Type().Field(i).Name)
		}
	}
	return out
}

// TestDocMapping: every domain type that is stored maps to its document
// type and back field by field. Filled completely (every field, nested
// ones included, a distinct non-zero value), the document has every field
// set and maps back to the same value; zero and empty values (nil versus
// empty slices, maps and bytes, which the codec stores differently) come
// back as they were. A field added to a domain type and not to its
// document type (or not mapped) fails here, and so does one added to a
// document type and not mapped.
func TestDocMapping(t *testing.T) {
	for _, tc := range docCases {
		t.Run(tc.name, func(t *testing.T) {
			for _, u := range tc.unstored {
				if _, ok := tc.domain.FieldByName(u); !ok {
					t.Fatalf("unstored field %s is not a field of %s", u, tc.domain)
				}
			}
			for _, mode := range []struct {
				name       string
				fill       func(reflect.Value)
				wantAllSet bool
			}{
				{"full", (&filler{}).fill, true},
				{"zero", func(reflect.Value) {}, false},
				{"empty", (&filler{empty: true}).fill, false},
			} {
				in := reflect.New(tc.domain)
				mode.fill(in.Elem())
				doc := tc.toDoc(in.Interface())
				if got, want := reflect.TypeOf(doc).Kind(), reflect.Struct; got != want {
					t.Fatalf("%s: document is a %s", mode.name, got)
				}
				if mode.wantAllSet {
					if missing := unset(reflect.ValueOf(doc), reflect.TypeOf(doc).Name()); len(missing) > 0 {
						t.Errorf("%s: document fields not set from a fully filled %s: %s", mode.name, tc.name, strings.Join(missing, ", "))
					}
				}
				back := reflect.ValueOf(tc.fromDoc(doc)).Elem()
				want := in.Elem()
				for _, u := range tc.unstored {
					want.FieldByName(u).SetZero()
				}
				if !reflect.DeepEqual(want.Interface(), back.Interface()) {
					t.Errorf("%s: %s → %T → %s loses or changes fields: %s", mode.name, tc.name, doc, tc.name, strings.Join(differing(want, back), ", "))
				}
			}
		})
	}
}

// storedSchema is the stored field names of each document type, in
// order: the names the domain types' firestore tags gave them before the
// document types existed. Documents already written are read by these
// names, and queries, update masks and indexes use them: a rename is a
// schema change (a migration), not a refactor.
var storedSchema = map[reflect.Type]string{
	reflect.TypeFor[taskDoc]():          "taskId runId tenantId workspaceId taskKey assetId worker payload resources idempotencyKey priority ownRun rerunOf scheduleId scheduledFireAt state reason cancelReason attempt seq timing retry deadline createdAt updatedAt endedAt expireAt notBefore enqueueAt leaseExpiresAt cancelDeadline dispatchCheckAt startTimeoutAt delivery dueShard redrives resumeFrom quota waitingSince waitRank live endedAttempt recorded trace history",
	reflect.TypeFor[deliveryDoc]():      "attempts lastStatus lastError lastAttemptAt nextTryAt checkedAt",
	reflect.TypeFor[attemptDoc]():       "attempt outcome workerId createdAt scheduledAt startedAt completedAt lastHeartbeatAt heartbeats heartbeatTicks progressPct message checkpoint error output metrics cancelledDuringPhase partialProgress reportedAt expireAt execution completionDigest",
	reflect.TypeFor[liveAttemptDoc]():   "attempt createdAt scheduledAt workerId startedAt lastHeartbeatAt heartbeats heartbeatTicks progressPct message checkpoint execution",
	reflect.TypeFor[stepDoc]():          "attempt from to reason outcome error nextAttempt seq occurredAt",
	reflect.TypeFor[transitionDoc]():    "eventId taskId runId tenantId workspaceId worker attempt priority from to reason outcome error nextAttempt seq occurredAt deadLetter scheduleId scheduledFireAt trace",
	reflect.TypeFor[quotaHoldDoc]():     "tenant worker tenantShard workerShard slot tenantSlotShard workerSlotShard share shareShard shareSlotShard",
	reflect.TypeFor[outageSpanDoc]():    "from to",
	reflect.TypeFor[errorInfoDoc]():     "category message stackTrace retryable",
	reflect.TypeFor[metricsDoc]():       "cpuTimeMs peakMemoryBytes ioReadBytes ioWriteBytes",
	reflect.TypeFor[timingDoc]():        "heartbeatIntervalMs heartbeatTimeoutMs cancelGracePeriodMs startTimeoutMs",
	reflect.TypeFor[retryPolicyDoc]():   "maxAttempts initialBackoffMs backoffCoefficient maxBackoffMs maxTotalAttempts byCategory failures",
	reflect.TypeFor[categoryRetryDoc](): "maxAttempts initialBackoffMs backoffCoefficient maxBackoffMs",
	reflect.TypeFor[sweepStatusDoc]():   "lastPassAt passMs passes duties redriveErrors",
	reflect.TypeFor[sweepDutyDoc]():     "due applied errors maxLagMs",
}

// TestDocSchema: every document type stores exactly its storedSchema
// names, each from an explicit tag (no Go field name leaks into a
// document), and holds no struct of package api or task (those are
// stored only through their document types); every document type that
// a mapped domain type reaches is listed.
func TestDocSchema(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(rt reflect.Type, path string) {
		switch rt.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			walk(rt.Elem(), path)
			return
		case reflect.Struct:
		default:
			return
		}
		if rt == timeType || seen[rt] {
			return
		}
		seen[rt] = true
		if p := rt.PkgPath(); p == apiPkg || p == taskPkg {
			t.Errorf("%s: holds %s, a domain struct: use its document type", path, rt)
			return
		}
		want, listed := storedSchema[rt]
		if !listed {
			t.Errorf("%s: document type %s is not in storedSchema", path, rt)
		}
		var names []string
		for i := range rt.NumField() {
			f := rt.Field(i)
			tag, ok := f.Tag.Lookup("firestore")
			if !ok || tag == "" || strings.HasPrefix(tag, ",") {
				t.Errorf("%s.%s: no explicit firestore name", rt, f.Name)
			}
			walk(f.Type, rt.Name()+"."+f.Name)
		}
		for _, f := range fieldsOf(rt) {
			names = append(names, f.name)
		}
		if listed && strings.Join(names, " ") != want {
			t.Errorf("%s stores\n  %s\nwant\n  %s", rt, strings.Join(names, " "), want)
		}
	}
	for _, tc := range docCases {
		walk(reflect.TypeOf(tc.toDoc(reflect.New(tc.domain).Interface())), tc.name)
	}
	for rt := range storedSchema {
		if !seen[rt] {
			t.Errorf("storedSchema lists %s, which no domain type maps to", rt)
		}
	}
	// The one option today's schema carries (the codec ignores it; kept
	// as it was).
	if f, _ := reflect.TypeFor[quotaHoldDoc]().FieldByName("Share"); f.Tag.Get("firestore") != "share,omitempty" {
		t.Errorf("quotaHoldDoc.Share tag = %q", f.Tag.Get("firestore"))
	}
}

// TestCodecDomainValues: encodeFields and decodeFields take a domain
// value through its document type: the fields written are the document
// type's, and they decode to the value written; decoding into a value
// keeps the fields the document lacks, as decoding into any struct does.
func TestCodecDomainValues(t *testing.T) {
	for _, tc := range []struct {
		name     string
		value    func() any // a pointer to a new zero domain value
		unstored []string
	}{
		{"task.Task", func() any { return new(task.Task) }, []string{"Attempts"}},
		{"task.Attempt", func() any { return new(task.Attempt) }, nil},
		{"task.Transition", func() any { return new(task.Transition) }, nil},
		{"task.Outage", func() any { return new(task.Outage) }, nil},
		{"api.SweepStatus", func() any { return new(api.SweepStatus) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.value()
			(&filler{}).fill(reflect.ValueOf(in).Elem())
			var dc *docCase
			for i := range docCases {
				if docCases[i].domain == reflect.TypeOf(in).Elem() {
					dc = &docCases[i]
				}
			}
			if dc == nil {
				t.Fatalf("no docCase for %s", tc.name)
			}
			// By value and by pointer, the document type's encoding.
			want := encodeFields(dc.toDoc(in))
			for _, v := range []any{in, reflect.ValueOf(in).Elem().Interface()} {
				if got := encodeFields(v); !proto.Equal(&pb.MapValue{Fields: got}, &pb.MapValue{Fields: want}) {
					t.Errorf("encodeFields(%T) is not its document's encoding", v)
				}
			}
			out := tc.value()
			if err := decodeFields(want, out); err != nil {
				t.Fatal(err)
			}
			exp := reflect.ValueOf(in).Elem()
			for _, u := range tc.unstored {
				exp.FieldByName(u).SetZero()
			}
			if !reflect.DeepEqual(exp.Interface(), reflect.ValueOf(out).Elem().Interface()) {
				t.Errorf("decode differs in %s", strings.Join(differing(exp, reflect.ValueOf(out).Elem()), ", "))
			}
			// A document that lacks a field leaves it as it was (and an
			// unstored field is never touched).
			partial := encodeFields(dc.toDoc(in))
			kept := slices.Sorted(maps.Keys(partial))[0]
			delete(partial, kept)
			prev := tc.value()
			(&filler{n: 1000}).fill(reflect.ValueOf(prev).Elem())
			before := reflect.ValueOf(prev).Elem().Interface()
			if err := decodeFields(partial, prev); err != nil {
				t.Fatal(err)
			}
			got, was := reflect.ValueOf(prev).Elem(), reflect.ValueOf(before)
			for i := range got.NumField() {
				f := got.Type().Field(i)
				name, stored := f.Name, !slices.Contains(tc.unstored, f.Name)
				if stored {
					name = fieldsOfName(t, reflect.TypeOf(dc.toDoc(in)), f.Name)
				}
				keep := !stored || name == kept
				if want := was.Field(i); keep && !reflect.DeepEqual(got.Field(i).Interface(), want.Interface()) {
					t.Errorf("%s (%s), absent from the document, changed", f.Name, name)
				}
				if want := reflect.ValueOf(in).Elem().Field(i); !keep && !reflect.DeepEqual(got.Field(i).Interface(), want.Interface()) {
					t.Errorf("%s (%s) not decoded", f.Name, name)
				}
			}
		})
	}
}

// fieldsOfName is the stored name of the document type's field goName.
func fieldsOfName(t *testing.T, doc reflect.Type, goName string) string {
	t.Helper()
	if under, ok := storedUnder[goName]; ok {
		goName = under
	}
	f, ok := doc.FieldByName(goName)
	if !ok {
		t.Fatalf("%s has no field %s", doc, goName)
	}
	name, _ := fieldName(f)
	return name
}

// storedUnder names the document field that stores a domain field kept
// inside another one's map: task.Task.Failures is retry.failures.
var storedUnder = map[string]string{"Failures": "Retry"}

// TestCodecRefusesDomainStructs: a domain struct met inside another
// struct (not through its document type) is a programming error, not a
// document with Go field names.
func TestCodecRefusesDomainStructs(t *testing.T) {
	for _, v := range []any{
		struct {
			S task.Step `firestore:"s"`
		}{},
		struct {
			E []api.ErrorInfo `firestore:"e"`
		}{E: []api.ErrorInfo{{}}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("encodeFields(%T) did not refuse", v)
				}
			}()
			encodeFields(v)
		}()
	}
}
