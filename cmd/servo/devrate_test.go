package main

import "testing"

// --worker-rate NAME=RATE: a positive rate per worker, anything else
// refused with the expected form.
func TestWorkerRateFlag(t *testing.T) {
	cases := []struct {
		arg  string
		want float64 // 0: refused
	}{
		{"render=1500", 1500},
		{"render=0.5", 0.5},
		{"render=0", 0},
		{"render=-3", 0},
		{"render=fast", 0},
		{"render=NaN", 0},
		{"render", 0},
		{"=1500", 0},
	}
	for _, c := range cases {
		r := rateFlags{}
		err := r.Set(c.arg)
		if c.want == 0 {
			if err == nil || len(r) != 0 {
				t.Errorf("--worker-rate %s: accepted as %v", c.arg, r)
			}
			continue
		}
		if err != nil || r["render"] != c.want {
			t.Errorf("--worker-rate %s: %v, %v; want render=%v", c.arg, r, err, c.want)
		}
	}
}
