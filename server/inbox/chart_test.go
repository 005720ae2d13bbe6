package inbox

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/runtime"
)

func TestLongLogsAreThinned(t *testing.T) {
	var pts []point
	var v int64
	for seq := uint64(1); seq <= 10000; seq++ {
		if seq%3 == 0 {
			v++
		}
		pts = append(pts, point{Seq: seq, At: time.Unix(int64(seq), 0), Value: v})
	}
	c := newChart("c", "test", pts, 5000, "limit")
	n := len(c.Points)
	if n > maxPoints || n < maxPoints/2 {
		t.Fatalf("%d points drawn of 10000, want at most %d", n, maxPoints)
	}
	first, last := c.Points[0], c.Points[n-1]
	if first.Seq != 1 || first.Value != 0 || last.Seq != 10000 || last.Value != 3333 || c.Final != 3333 {
		t.Errorf("first %+v, last %+v, final %d", first, last, c.Final)
	}
	if first.X != padL || last.X != chartW-padR {
		t.Errorf("x from %g to %g, want the whole width", first.X, last.X)
	}
	for i := 1; i < n; i++ {
		if c.Points[i].Seq <= c.Points[i-1].Seq || c.Points[i].X <= c.Points[i-1].X {
			t.Fatalf("points out of order at %d", i)
		}
	}
	// A short series is drawn whole.
	if c := newChart("c", "test", pts[:7], 10, "limit"); len(c.Points) != 7 {
		t.Errorf("7 records drew %d points", len(c.Points))
	}
}

func TestTimelineShowsTheNewest(t *testing.T) {
	rt := openRuntime(t)
	c, err := compiler.Compile("", []byte(`{"budget": 1, "tools": {"ping": {"cost": 0}}}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := rt.CreateAgent(ctx, c, runtime.CreateOptions{Name: "chatty"})
	if err != nil {
		t.Fatal(err)
	}
	for range 250 {
		if _, err := rt.Request(ctx, id, lineage.Request{Tool: "ping"}); err != nil {
			t.Fatal(err)
		}
	}
	in := New(Backend{Runtime: rt})
	const cookie = "test-session"
	in.sessions[sha256.Sum256([]byte(cookie))] = &session{p: api.Principal{Name: "alice", Role: "approver"}, csrf: "x", expires: time.Now().Add(time.Hour)}
	req := httptest.NewRequest("GET", "/agents/"+id, nil)
	req.AddCookie(&http.Cookie{Name: sessionCookie, Value: cookie})
	rec := httptest.NewRecorder()
	in.ServeHTTP(rec, req)
	body := rec.Body.String()
	if rec.Code != 200 {
		t.Fatalf("agent page: %d %s", rec.Code, body)
	}
	if n := strings.Count(body, `<li class="record`); n != maxTimeline {
		t.Errorf("%d records listed, want the newest %d", n, maxTimeline)
	}
	if !strings.Contains(body, "The newest 200 of 252 records") || !strings.Contains(body, `data-seq="251" data-kind="action"`) {
		t.Error("the page does not say it shows the newest 200 of 252, from seq 251")
	}
}
