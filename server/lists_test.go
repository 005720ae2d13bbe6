package server_test

import (
	"net/http"
	"slices"
	"sort"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
)

// TestListsPaged: GET /v1/agents and /v1/pending answer pages of limit rows
// with next_cursor until the last; /v1/agents filters by status; a bad
// limit, status or cursor is 400 bad_request (docs/service.md).
func TestListsPaged(t *testing.T) {
	e := start(t)
	var ids []string
	for range 5 {
		id, ac := e.agent()
		ids = append(ids, id)
		if _, err := ac.Request(bg, id, lineage.Request{ID: "w1", Tool: "wire"}); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(ids)
	if _, err := e.approver.Approve(bg, ids[1], "w1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.approver.Terminate(bg, ids[3], ""); err != nil {
		t.Fatal(err)
	}

	var got []string
	p := client.Page{Limit: 2}
	pages := 0
	for {
		rows, next, err := e.approver.AgentsPage(bg, p)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range rows {
			got = append(got, r.Agent)
			if r.Name != "bot" || r.Digest == "" {
				t.Errorf("row %+v", r)
			}
		}
		if next == "" {
			break
		}
		p.Cursor = next
	}
	if !slices.Equal(got, ids) || pages != 3 {
		t.Errorf("agents by 2: %q in %d pages, want %q in 3", got, pages, ids)
	}
	dead, next, err := e.approver.AgentsPage(bg, client.Page{Status: "terminated"})
	if err != nil || next != "" || len(dead) != 1 || dead[0].Agent != ids[3] || dead[0].Status != "terminated" {
		t.Errorf("terminated agents: %+v %q %v", dead, next, err)
	}

	var pend []string
	p = client.Page{Limit: 1}
	for {
		rows, next, err := e.approver.PendingPage(bg, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) > 1 {
			t.Fatalf("a page of %d rows, limit 1", len(rows))
		}
		for _, r := range rows {
			pend = append(pend, r.Agent)
			if r.Tool != "wire" || r.Cost != 2 || r.Name != "bot" || r.At.IsZero() || r.Args == nil {
				t.Errorf("pending row %+v", r)
			}
		}
		if next == "" {
			break
		}
		p.Cursor = next
	}
	if want := []string{ids[0], ids[2], ids[4]}; !slices.Equal(pend, want) {
		t.Errorf("pending: %q, want %q", pend, want)
	}
	all, err := e.approver.Pending(bg)
	if err != nil || len(all) != 3 {
		t.Errorf("Pending (every page): %d rows, %v", len(all), err)
	}

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "cursor=%21%21", "status=asleep", "sort=id", "limit=1&limit=2"} {
		for _, path := range []string{"/v1/agents?", "/v1/pending?"} {
			status, body := e.raw("GET", path+q, e.tokens["approver"], "")
			if status != http.StatusBadRequest || body["code"] != "bad_request" {
				t.Errorf("GET %s%s: %d %v, want 400 bad_request", path, q, status, body)
			}
		}
	}
	status, body := e.raw("GET", "/v1/pending?limit=3", e.tokens["approver"], "")
	if status != http.StatusOK || body["next_cursor"] != nil {
		t.Errorf("the last page: %d next_cursor %v, want null", status, body["next_cursor"])
	}
}
