package runtime

import (
	"fmt"

	"github.com/lineage-guard/lineage"
)

// Restore puts a fresh scratch agent in a folded state as `lineagec state`
// prints it, so that its next request is decided as that agent's would be
// (lineagec explain --state): status and termination, spent, scars, calls,
// the rate window and the pending requests. The state must be of the same
// budget; the records that led to it are not known, so an earlier request id
// is not recognised as a retry.
func (s *Scratch) Restore(st lineage.State) error {
	f := s.a.f
	if st.Budget != f.budget {
		return fmt.Errorf("%w: the state has a budget of %d, the policy %d", lineage.ErrBadRequest, st.Budget, f.budget)
	}
	if st.Spent < 0 || st.Spent > st.Budget || st.ScarScore < 0 {
		return fmt.Errorf("%w: the state's spent (%d) or scar_score (%d) is out of range", lineage.ErrBadRequest, st.Spent, st.ScarScore)
	}
	if st.Status != lineage.Alive && st.Status != lineage.Terminated {
		return fmt.Errorf("%w: the state's status %q is neither alive nor terminated", lineage.ErrBadRequest, st.Status)
	}
	f.status, f.termination = st.Status, st.Termination
	f.spent, f.scarScore = st.Spent, st.ScarScore
	f.scars = [3]int64{st.Scars[lineage.Minor], st.Scars[lineage.Moderate], st.Scars[lineage.Severe]}
	f.calls = make(map[string]int64, len(st.Calls))
	for k, v := range st.Calls {
		f.calls[k] = v
	}
	f.pending = make(map[string]lineage.RecordedRequest, len(st.Pending))
	for k, v := range st.Pending {
		f.pending[k] = v
	}
	f.window, f.windowNext = nil, 0
	if f.maxActions > 0 {
		ws := st.Window
		if len(ws) > f.maxActions {
			ws = ws[len(ws)-f.maxActions:]
		}
		for _, t := range ws {
			f.window = append(f.window, t.UnixNano())
			if t.After(f.lastAt) {
				f.lastAt = t.Time
			}
		}
	}
	return nil
}
