package schedule

// PassStats counts what one sweeper pass's schedule duty did.
type PassStats struct {
	// Due is the number of schedules due at the pass; Upcoming those due
	// later within the sweeper's window (they keep the window open).
	Due      int `json:"due"`
	Upcoming int `json:"upcoming,omitempty"`
	// Started, Skipped, Buffered, Missed and Failed count fires by outcome.
	Started  int `json:"started"`
	Skipped  int `json:"skipped,omitempty"`
	Buffered int `json:"buffered,omitempty"`
	Missed   int `json:"missed,omitempty"`
	Failed   int `json:"failed,omitempty"`
	// Errors counts schedules the pass could not advance (retried on the
	// next pass); QueryErrors due queries that failed.
	Errors      int `json:"errors,omitempty"`
	QueryErrors int `json:"queryErrors,omitempty"`
}

// Add adds o's counts to s.
func (s *PassStats) Add(o PassStats) {
	s.Due += o.Due
	s.Upcoming += o.Upcoming
	s.Started += o.Started
	s.Skipped += o.Skipped
	s.Buffered += o.Buffered
	s.Missed += o.Missed
	s.Failed += o.Failed
	s.Errors += o.Errors
	s.QueryErrors += o.QueryErrors
}
