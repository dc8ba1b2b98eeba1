package task

import (
	"testing"
	"time"
)

func TestRefreshBefore(t *testing.T) {
	cases := []struct{ lifetime, interval, want time.Duration }{
		{time.Hour, 30 * time.Second, 15 * time.Minute},
		{time.Hour, 35 * time.Minute, 70 * time.Minute},
		{2 * time.Hour, 10 * time.Minute, 30 * time.Minute},
	}
	for _, c := range cases {
		if got := RefreshBefore(c.lifetime, c.interval); got != c.want {
			t.Errorf("RefreshBefore(%v, %v) = %v, want %v", c.lifetime, c.interval, got, c.want)
		}
	}
}
