package inbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
)

func pathEscape(s string) string { return url.PathEscape(s) }

// pendingRow is one request that waits, as the inbox lists it. Every string
// but the URLs comes from an agent and is rendered as text.
type pendingRow struct {
	Agent, Name, RequestID, Tool, Args string
	Cost, Remaining, Budget            int64
	Damaged                            string // why the agent does not open; its budget is then unknown
	At                                 time.Time
	Approve, Reject, AgentURL          string
}

// argsText is a request's args as JSON text: the encoder does not escape
// HTML (the template does), so `<` shows as `<`, not as \u003c (D126: agent strings are text).
func argsText(args map[string]any) string {
	if len(args) == 0 {
		return "{}"
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(args); err != nil {
		return fmt.Sprint(args)
	}
	return string(bytes.TrimRight(buf.Bytes(), "\n"))
}

// inboxPage is how many rows a page of the inbox shows.
const inboxPage = 100

// pendingList reads one page of pending requests from the store's index (the
// page of the request's ?cursor=), oldest first within the page, with the
// budget of their agents: it opens only the agents on the page
// (docs/service.md: the inbox pages the same way). A row is listed as the
// index has it, as the API and the CLI list it: an agent that does not open
// shows its budget unknown and why (D395 (a pending list lists the index)).
func (in *Inbox) pendingList(r *http.Request) ([]pendingRow, string, error) {
	list, next, err := in.b.Runtime.ListPending(runtime.ListQuery{Cursor: r.URL.Query().Get("cursor"), Limit: inboxPage})
	if err != nil {
		return nil, "", err
	}
	rows := []pendingRow{}
	type opened struct {
		st  lineage.State
		err error
	}
	states := map[string]opened{}
	for _, p := range list {
		o, ok := states[p.Agent]
		if !ok {
			o.st, o.err = in.b.Runtime.State(r.Context(), p.Agent)
			if o.err != nil {
				if r.Context().Err() != nil {
					return nil, "", o.err
				}
				in.log.Warn("inbox: a pending request's agent does not open", "agent", p.Agent, "error", o.err.Error())
			}
			states[p.Agent] = o
		}
		base := "/agents/" + pathEscape(p.Agent) + "/requests/" + pathEscape(p.RequestID)
		row := pendingRow{Agent: p.Agent, Name: p.Name, RequestID: p.RequestID, Tool: p.Tool,
			Args: argsText(p.Args), Cost: p.Cost, Remaining: o.st.Remaining, Budget: o.st.Budget, At: p.At,
			Approve: base + "/approve", Reject: base + "/reject", AgentURL: "/agents/" + pathEscape(p.Agent)}
		if o.err != nil {
			row.Damaged = o.err.Error()
		}
		rows = append(rows, row)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].At.Before(rows[j].At) })
	return rows, next, nil
}

// nextPage is the link to the page after, "" after the last.
func nextPage(path, cursor string) string {
	if cursor == "" {
		return ""
	}
	return path + "?cursor=" + url.QueryEscape(cursor)
}

type pendingData struct {
	Rows []pendingRow
	CSRF string
	Next string // the next page's link, "" on the last
}

func (in *Inbox) pendingPage(w http.ResponseWriter, r *http.Request, s *session) {
	rows, next, err := in.pendingList(r)
	if err != nil {
		in.failErr(w, r, err)
		return
	}
	in.render(w, http.StatusOK, "pending", page{Title: "Pending requests", Nav: "pending", Session: s, Live: "pending",
		Data: pendingData{Rows: rows, CSRF: s.csrf, Next: nextPage("/", next)}})
}

// pendingRows is the body of the pending table alone: the script fetches it
// when an event says the list changed (D127: live updates).
func (in *Inbox) pendingRows(w http.ResponseWriter, r *http.Request, s *session) {
	rows, _, err := in.pendingList(r)
	if err != nil {
		in.failErr(w, r, err)
		return
	}
	var buf bytes.Buffer
	if err := in.rows.ExecuteTemplate(&buf, "pending-rows", pendingData{Rows: rows, CSRF: s.csrf}); err != nil {
		in.failErr(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Pending-Count", fmt.Sprint(len(rows)))
	_, _ = w.Write(buf.Bytes())
}

// agentRow is one agent of the agents list.
type agentRow struct {
	Agent, Name, Status, URL string
	Alive                    bool
	Budget, Remaining        int64
	ScarScore, ScarLimit     int64
	Pending                  int
	Error                    string
}

// scarLimit reads the scar limit of a normalized policy (it is always there).
func scarLimit(doc json.RawMessage) int64 {
	var p struct {
		ScarLimit int64 `json:"scar_limit"`
	}
	_ = json.Unmarshal(doc, &p)
	return p.ScarLimit
}

// agentsData is a page of the agents list.
type agentsData struct {
	Rows []agentRow
	Next string // the next page's link, "" on the last
}

// agentsPage shows one page of agents (?cursor=), from the store's index,
// opening only the agents on the page for their budget and scars.
func (in *Inbox) agentsPage(w http.ResponseWriter, r *http.Request, s *session) {
	list, next, err := in.b.Runtime.ListAgents(runtime.ListQuery{Cursor: r.URL.Query().Get("cursor"), Limit: inboxPage})
	if err != nil {
		in.failErr(w, r, err)
		return
	}
	rows := make([]agentRow, 0, len(list))
	for _, a := range list {
		id := a.Agent
		row := agentRow{Agent: id, Name: a.Name, URL: "/agents/" + pathEscape(id)}
		info, err := in.b.Runtime.Info(r.Context(), id)
		var st lineage.State
		if err == nil {
			st, err = in.b.Runtime.State(r.Context(), id)
		}
		if err != nil {
			if r.Context().Err() != nil {
				in.failErr(w, r, err)
				return
			}
			row.Status, row.Error = "damaged", err.Error()
			rows = append(rows, row)
			continue
		}
		row.Name, row.Status, row.Alive = info.Name, string(st.Status), st.Status == lineage.Alive
		row.Budget, row.Remaining, row.ScarScore, row.ScarLimit = st.Budget, st.Remaining, st.ScarScore, scarLimit(info.Policy)
		row.Pending = len(st.Pending)
		rows = append(rows, row)
	}
	in.render(w, http.StatusOK, "agents", page{Title: "Agents", Nav: "agents", Session: s, Data: agentsData{Rows: rows, Next: nextPage("/agents", next)}})
}

// entry is one record of an agent's timeline.
type entry struct {
	Seq             uint64
	At              time.Time
	Kind            string
	Badge, Icon     string // the verdict in words and a symbol: never colour alone
	Class           string
	Summary, Detail string
}

type agentData struct {
	Agent, Name string
	State       lineage.State
	ScarLimit   int64
	Verified    api.VerifyResult
	VerifyErr   string
	Timeline    []entry
	Credits     chart
	Scars       chart
	CSRF        string
	Terminate   string
	Note        string
	ScarCounts  string
	Records     int // in the log; the timeline shows the newest maxTimeline
}

// maxTimeline is the most records the agent page lists (the log has them all).
const maxTimeline = 200

func verdictBadge(v lineage.Verdict) (badge, icon, class string) {
	switch v.Decision {
	case lineage.Allow:
		return "allowed", "✔", "allow"
	case lineage.Pending:
		// No character: ⏳ is an emoji that a machine without an emoji font
		// shows as an empty box; the template draws an hourglass in SVG.
		// D309 (the inbox reads the same without emoji fonts or a clock).
		return "pending", "", "pending"
	}
	if v.Scar != nil {
		return fmt.Sprintf("denied, %s scar (+%d)", v.Scar.Severity, v.Scar.Weight), "✖", "deny"
	}
	return "denied", "✖", "deny"
}

func (in *Inbox) agentPage(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("agent")
	info, err := in.b.Runtime.Info(r.Context(), id)
	if err != nil {
		in.failErr(w, r, err)
		return
	}
	st, err := in.b.Runtime.State(r.Context(), id)
	if err != nil {
		in.failErr(w, r, err)
		return
	}
	d := agentData{Agent: id, Name: info.Name, State: st, ScarLimit: scarLimit(info.Policy), CSRF: s.csrf,
		Terminate: "/agents/" + pathEscape(id) + "/terminate",
		ScarCounts: fmt.Sprintf("minor %d, moderate %d, severe %d",
			st.Scars[lineage.Minor], st.Scars[lineage.Moderate], st.Scars[lineage.Severe])}
	if in.b.Verify != nil {
		d.Verified, err = in.b.Verify(id)
		if err != nil {
			d.VerifyErr = err.Error()
		}
	}
	recs, err := in.b.Runtime.Records(id)
	if err != nil {
		d.Note = "The timeline and the charts are missing: " + err.Error()
	}
	var tl timeline
	for _, rec := range recs {
		d.Timeline = append(d.Timeline, tl.add(rec))
	}
	// Newest first reads best, and only the newest maxTimeline (D129: long logs); the
	// charts keep the order of the log.
	for i, j := 0, len(d.Timeline)-1; i < j; i, j = i+1, j-1 {
		d.Timeline[i], d.Timeline[j] = d.Timeline[j], d.Timeline[i]
	}
	d.Records = len(d.Timeline)
	if len(d.Timeline) > maxTimeline {
		d.Timeline = d.Timeline[:maxTimeline]
	}
	d.Credits = newChart("chart-credits", "Credits spent", tl.spent, st.Budget, "budget")
	d.Scars = newChart("chart-scars", "Scar score", tl.scars, d.ScarLimit, "scar limit")
	in.render(w, http.StatusOK, "agent", page{Title: "Agent " + id, Nav: "agents", Session: s, Data: d})
}

// timeline turns records into timeline entries and the two series of the
// charts: the credits and scar weights the recorded verdicts carry (D124: the charts).
type timeline struct {
	spent, scars  []point
	spentN, scarN int64
}

func (tl *timeline) add(rec lineage.Record) entry {
	e := entry{Seq: rec.Seq, At: rec.At.Time, Kind: string(rec.Kind)}
	switch rec.Kind {
	case lineage.KindGenesis:
		var b lineage.GenesisBody
		_ = json.Unmarshal(rec.Body, &b)
		e.Icon, e.Badge, e.Class, e.Summary = "★", "created", "info", "agent "+b.Agent
		if b.Name != "" {
			e.Summary += " (" + b.Name + ")"
		}
		if b.Parent != nil {
			e.Detail = "parent " + b.Parent.Agent + " at " + b.Parent.Head
		}
	case lineage.KindPolicy:
		var b lineage.PolicyBody
		_ = json.Unmarshal(rec.Body, &b)
		e.Icon, e.Badge, e.Class, e.Summary = "§", "policy", "info", b.Digest
	case lineage.KindAction:
		var b lineage.ActionBody
		_ = json.Unmarshal(rec.Body, &b)
		e.Badge, e.Icon, e.Class = verdictBadge(b.Verdict)
		e.Summary = b.Request.Tool + " " + argsText(b.Request.Args)
		e.Detail = fmt.Sprintf("request %s: %s", b.Request.ID, b.Verdict.Reason)
		tl.count(b.Verdict)
	case lineage.KindApproval:
		var b lineage.ApprovalBody
		_ = json.Unmarshal(rec.Body, &b)
		e.Badge, e.Icon, e.Class = verdictBadge(b.Verdict)
		what := "rejected"
		switch {
		case !b.Approved:
			e.Badge, e.Icon, e.Class = "rejected", "✖", "deny"
		case b.Verdict.Decision == lineage.Allow:
			what, e.Badge = "approved", "approved"
		default: // approved, but the guard denied it then (the budget ran out meanwhile)
			what, e.Badge = "approved", "approved, then "+e.Badge
		}
		e.Summary = fmt.Sprintf("%s %s request %s", b.Approver, what, b.RequestID)
		e.Detail = b.Verdict.Reason
		tl.count(b.Verdict)
	case lineage.KindTermination:
		var b lineage.TerminationBody
		_ = json.Unmarshal(rec.Body, &b)
		e.Icon, e.Badge, e.Class, e.Summary = "☠", "terminated", "deny", string(b.Reason)
		if b.By != "" {
			e.Summary += " by " + b.By
		}
		e.Detail = b.Note
	}
	if rec.Seq >= 1 { // the charts start at the policy: nothing spent yet
		tl.spent = append(tl.spent, point{Seq: rec.Seq, At: rec.At.Time, Value: tl.spentN})
		tl.scars = append(tl.scars, point{Seq: rec.Seq, At: rec.At.Time, Value: tl.scarN})
	}
	return e
}

func (tl *timeline) count(v lineage.Verdict) {
	switch {
	case v.Decision == lineage.Allow:
		tl.spentN += v.Cost
	case v.Decision == lineage.Deny && v.Scar != nil:
		tl.scarN += v.Scar.Weight
	}
}
