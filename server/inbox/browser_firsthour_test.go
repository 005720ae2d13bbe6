package inbox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/api"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/lineage-guard/lineage"
)

// TestBrowserFirstHour: what a new approver met in the inbox (issue 25):
// the pending badge drawn without an emoji font, timeline times in the
// reader's time zone with the exact value on hover, tool names that do not
// break mid-word at 1100 px, and a warning on a request whose approval
// spends the last credits. D309 (the inbox reads the same without emoji
// fonts or a clock).
func TestBrowserFirstHour(t *testing.T) {
	tb := newTab(t)
	e := start(t)
	ctx := context.Background()
	const pol = `{"budget": 3, "tools": {"reconcile_ledger_entries": {"cost": 3, "requires_approval": true},
		"wire": {"cost": 2, "requires_approval": true}, "pay": {"cost": 2}}}`
	var c api.Created
	memo := strings.Repeat("settle the quarter's open items against the bank statement ", 6)
	// One agent waits on a call that costs all it has; another on one that
	// costs more than it has left since (a payment after the request).
	for _, reqs := range [][]lineage.Request{
		{{ID: "last-1", Tool: "reconcile_ledger_entries", Args: map[string]any{"memo": memo}}},
		{{ID: "over-1", Tool: "wire", Args: map[string]any{"to": "acct-7"}}, {Tool: "pay"}},
	} {
		var err error
		if c, err = e.admin.CreateAgent(ctx, json.RawMessage(pol), "ledger-bot", ""); err != nil {
			t.Fatal(err)
		}
		bot := e.client(c.Token)
		for _, r := range reqs {
			if _, err := bot.Request(ctx, c.Agent, r); err != nil {
				t.Fatal(err)
			}
		}
	}

	tb.do(t, chromedp.Navigate(e.url+"/"))
	tb.waitFor(t, "the sign-in page", `location.pathname === "/signin" && document.activeElement && document.activeElement.id === "token"`)
	tb.do(t, chromedp.SendKeys(chromedp.CSS("#token"), e.apprTok+kb.Enter))
	tb.waitFor(t, "the inbox", `location.pathname === "/" && document.querySelector('`+row("last-1")+`') !== null`)

	t.Run("the last credits are said on the row", func(t *testing.T) {
		var warn struct{ Last, Over string }
		tb.eval(t, `({Last: (document.querySelector('`+row("last-1")+` .warn') || {}).textContent || "",
			Over: (document.querySelector('`+row("over-1")+` .warn') || {}).textContent || ""})`, &warn)
		if !strings.Contains(warn.Last, "approving terminates the agent") {
			t.Errorf("the row of a call that spends the last credits warns %q", warn.Last)
		}
		if !strings.Contains(warn.Over, "more than the budget left") {
			t.Errorf("the row of a call over the budget left warns %q", warn.Over)
		}
	})

	t.Run("tool names do not break mid-word at 1100 px", func(t *testing.T) {
		tb.do(t, chromedp.EmulateViewport(1100, 800))
		defer tb.do(t, chromedp.EmulateViewport(1000, 800))
		var lines int
		tb.eval(t, `(() => {
			const node = document.querySelector('`+row("last-1")+` td.tool div').firstChild;
			const r = document.createRange();
			r.selectNodeContents(node);
			return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size;
		})()`, &lines)
		if lines != 1 {
			t.Errorf("the tool name reconcile_ledger_entries takes %d lines at 1100 px, want 1", lines)
		}
	})

	t.Run("timeline: an hourglass without emoji fonts, local times", func(t *testing.T) {
		tb.do(t, chromedp.Navigate(e.url+"/agents/"+c.Agent))
		tb.waitFor(t, "the timeline", `document.querySelector(".timeline .badge.pending") !== null`)
		var badge struct {
			Width float64
			Text  string
		}
		tb.eval(t, `(() => {
			const b = document.querySelector(".timeline .badge.pending"), svg = b.querySelector("svg");
			return {Width: svg ? svg.getBoundingClientRect().width : 0, Text: b.textContent.trim()};
		})()`, &badge)
		if badge.Width <= 0 || badge.Text != "pending" || strings.ContainsRune(badge.Text, '⏳') {
			t.Errorf("pending badge: svg width %v, text %q; want an SVG icon and the word", badge.Width, badge.Text)
		}
		var times []struct{ Text, Title, Datetime string }
		tb.eval(t, `[...document.querySelectorAll(".timeline time")].map(el => ({Text: el.textContent, Title: el.title, Datetime: el.getAttribute("datetime")}))`, &times)
		if len(times) == 0 {
			t.Fatal("no times in the timeline")
		}
		for _, tm := range times {
			if tm.Title != tm.Datetime || strings.Contains(tm.Text, "T") || tm.Text == tm.Datetime || !strings.Contains(tm.Text, ":") {
				t.Errorf("a timeline time shows %q (hover %q) for %s: want the local time, the exact value on hover", tm.Text, tm.Title, tm.Datetime)
			}
		}
	})
}
