package deploy

import "testing"

// The trace sampling variables: their defaults pass, bad values are
// refused at plan time.
func TestTerraformTraceSamplingValidation(t *testing.T) {
	for _, tc := range []struct {
		variable, value string
		ok              bool
	}{
		{"trace_sample_ratio", `0.1`, true},
		{"trace_sample_ratio", `0`, true},
		{"trace_sample_ratio", `1`, true},
		{"trace_sample_ratio", `1.5`, false},
		{"trace_sample_ratio", `-0.1`, false},
		{"trace_slow", `"1s"`, true},
		{"trace_slow", `"500ms"`, true},
		{"trace_slow", `"1"`, false},
		{"trace_slow", `"-1s"`, false},
	} {
		t.Run(tc.variable+"="+tc.value, func(t *testing.T) {
			failed := variableValidations(t, tc.variable, tc.value)
			if (len(failed) == 0) != tc.ok {
				t.Fatalf("%s = %s: failed validations %q; want ok=%v", tc.variable, tc.value, failed, tc.ok)
			}
		})
	}
}
