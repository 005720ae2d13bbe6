package inbox_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/lineage-guard/lineage"
)

var screenshots = flag.Bool("screenshots", false, "write the inbox's screenshots to docs/img/ (like the goldens' -update)")

// chromium finds Debian's chromium. Outside CI a machine without it skips the
// browser tests and says why; under CI=true they never skip.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "browser tests need Debian's chromium on $PATH (apt-get install chromium)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + ", and CI=true: they may not skip")
	}
	t.Skip(msg)
	return ""
}

// tab is one headless Chromium (a fresh profile, no sandbox, no background
// networking) with one page, shared by every case: starting it is the slow part.
type tab struct {
	ctx     context.Context
	dialogs atomic.Int32 // alert/confirm/prompt dialogs opened (an XSS would open one)

	mu       sync.Mutex
	problems []string // script exceptions and Content-Security-Policy refusals
}

func (tb *tab) problem(s string) {
	tb.mu.Lock()
	tb.problems = append(tb.problems, s)
	tb.mu.Unlock()
}

func newTab(t *testing.T) *tab {
	exe := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(1000, 800),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	tb := &tab{ctx: ctx}
	if err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *cdpruntime.EventExceptionThrown:
			tb.problem(fmt.Sprintf("exception: %s %s", ev.ExceptionDetails.Text, ev.ExceptionDetails.URL))
		case *cdplog.EventEntryAdded:
			if strings.Contains(ev.Entry.Text, "Content Security Policy") || ev.Entry.Level == cdplog.EntryLevelError {
				tb.problem(string(ev.Entry.Level) + ": " + ev.Entry.Text + " " + ev.Entry.URL)
			}
		}
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			tb.dialogs.Add(1)
			go chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
				_, err := cdp.Call(ctx, t, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
				return err
			}))
		}
	}); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1000, 800)); err != nil {
		t.Fatalf("starting chromium (%s): %v", exe, err)
	}
	return tb
}

func (tb *tab) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(tb.ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression and decodes its value into out.
func (tb *tab) eval(t *testing.T, expr string, out any) {
	t.Helper()
	raw, err := chromedp.Run(tb.ctx, chromedp.Evaluate[[]byte](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s = %s: %v", expr, raw, err)
	}
}

// waitFor waits until a JavaScript expression is true; a navigation on the
// way (a form's redirect) starts the wait again on the new page.
func (tb *tab) waitFor(t *testing.T, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := chromedp.Run(tb.ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(time.Until(deadline))))
		if err == nil {
			return
		}
		if !transient(err) || time.Now().After(deadline) {
			t.Fatalf("waiting for %s (%s): %v", what, expr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// transient says an evaluation failed because the page changed under it.
func transient(err error) bool {
	s := err.Error()
	return strings.Contains(s, "navigated or closed") || strings.Contains(s, "Cannot find context")
}

// screenshot writes the top of the page, width × height, to docs/img/name
// when -screenshots is given; the viewport is then width × 800 again.
func (tb *tab) screenshot(t *testing.T, name string, width, height int64) {
	t.Helper()
	if !*screenshots {
		return
	}
	tb.do(t, chromedp.EmulateViewport(width, height))
	defer tb.do(t, chromedp.EmulateViewport(width, 800))
	png, err := chromedp.Run(tb.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join("..", "..", "docs", "img", name)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", file, len(png))
}

func row(id string) string { return fmt.Sprintf(`tr[data-request=%q]`, id) }

// noReload marks the page; the mark survives only while the page is not reloaded.
const (
	markPage   = `window.__mark = "kept"; true`
	pageIsSame = `window.__mark === "kept"`
)

// TestBrowser drives the inbox in a real Chromium, one browser for every case.
func TestBrowser(t *testing.T) {
	tb := newTab(t)
	e := start(t)
	defer func() {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		if len(tb.problems) > 0 {
			t.Errorf("the pages logged problems (a script error, or a refusal under the CSP):\n%s", strings.Join(tb.problems, "\n"))
		}
	}()
	ctx := context.Background()
	agent, _, bot := e.agent("payments-bot")

	t.Run("sign in", func(t *testing.T) {
		tb.do(t, chromedp.Navigate(e.url+"/"))
		tb.waitFor(t, "the sign-in page", `location.pathname === "/signin" && document.activeElement && document.activeElement.id === "token"`)
		// Keyboard only: the token field has the focus, Enter submits.
		tb.do(t, chromedp.SendKeys(chromedp.CSS("#token"), e.apprTok+kb.Enter))
		tb.waitFor(t, "the inbox", `location.pathname === "/" && document.querySelector(".who") !== null`)
		var who string
		tb.eval(t, `document.querySelector(".who").textContent`, &who)
		if who != "alice (approver)" {
			t.Fatalf("signed in as %q", who)
		}
	})

	t.Run("accessible controls", func(t *testing.T) {
		var problems []string
		tb.eval(t, `(() => {
			const out = [];
			document.querySelectorAll("button").forEach(b => {
				if (!(b.getAttribute("aria-label") || b.textContent.trim())) out.push("a button without a label");
			});
			document.querySelectorAll("input:not([type=hidden])").forEach(i => {
				if (!(i.labels && i.labels.length) && !i.getAttribute("aria-label")) out.push("input " + i.name + " without a label");
			});
			document.querySelectorAll("[tabindex]").forEach(el => {
				if (el.tabIndex < 0) out.push("a control taken out of the tab order");
			});
			return out;
		})()`, &problems)
		if len(problems) > 0 {
			t.Fatal(problems)
		}
	})

	t.Run("a request appears without a reload", func(t *testing.T) {
		tb.waitFor(t, "the event stream", `document.body.dataset.connected === "yes"`)
		var ok bool
		tb.eval(t, markPage, &ok)
		if _, err := bot.Request(ctx, agent, lineage.Request{ID: "live-1", Tool: "wire", Args: map[string]any{"to": "acct-7", "amount": 250}}); err != nil {
			t.Fatal(err)
		}
		tb.waitFor(t, "the new row", `document.querySelector('`+row("live-1")+`') !== null`)
		var cells []string
		tb.eval(t, `[...document.querySelectorAll('`+row("live-1")+` td')].map(td => td.textContent.replace(/\s+/g, " ").trim())`, &cells)
		got := strings.Join(cells, " | ")
		if len(cells) != 7 || !regexp.MustCompile(`^\d+s$`).MatchString(cells[5]) {
			t.Errorf("cells %q: want 7, the sixth how long it waited", cells)
		}
		for _, want := range []string{"payments-bot", "wire", `{"amount":250,"to":"acct-7"}`, "2", "10 / 10"} {
			if !strings.Contains(got, want) {
				t.Errorf("row %q lacks %q", got, want)
			}
		}
		tb.eval(t, pageIsSame, &ok)
		if !ok {
			t.Fatal("the page was reloaded")
		}
	})

	t.Run("approve ends the agent's wait with allow", func(t *testing.T) {
		got := make(chan lineage.Verdict, 1)
		errs := make(chan error, 1)
		go func() {
			v, err := bot.Verdict(ctx, agent, "live-1", 30*time.Second)
			got <- v
			errs <- err
		}()
		time.Sleep(100 * time.Millisecond) // let the wait begin (it also works if it begins after)
		tb.do(t, chromedp.Click(chromedp.CSS(row("live-1")+" button.approve")))
		select {
		case v := <-got:
			if err := <-errs; err != nil || v.Decision != lineage.Allow {
				t.Fatalf("?wait= returned %+v %v, want allow", v, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the agent's ?wait= call did not return")
		}
		tb.waitFor(t, "the decided row to leave", `document.querySelector('`+row("live-1")+`') === null`)
		var ok bool
		tb.eval(t, pageIsSame, &ok)
		if !ok {
			t.Fatal("the page was reloaded")
		}
		var status string
		tb.eval(t, `document.getElementById("status").textContent`, &status)
		if !strings.Contains(status, "approved") {
			t.Errorf("status line %q", status)
		}
	})

	t.Run("reject", func(t *testing.T) {
		if _, err := bot.Request(ctx, agent, lineage.Request{ID: "live-2", Tool: "wire", Args: map[string]any{"to": "acct-9"}}); err != nil {
			t.Fatal(err)
		}
		tb.waitFor(t, "the new row", `document.querySelector('`+row("live-2")+` button.reject') !== null`)
		// By keyboard: Tab from the top of the page reaches the button, Enter presses it.
		var ok bool
		tb.eval(t, `document.activeElement && document.activeElement.blur(), window.scrollTo(0, 0), true`, &ok)
		focused := `document.activeElement === document.querySelector('` + row("live-2") + ` button.reject')`
		for i := 0; ; i++ {
			if tb.eval(t, focused, &ok); ok {
				break
			}
			if i == 40 {
				t.Fatal("40 Tabs did not reach the Reject button")
			}
			tb.do(t, chromedp.KeyEvent(kb.Tab))
		}
		tb.do(t, chromedp.KeyEvent(kb.Enter))
		tb.waitFor(t, "the rejected row to leave", `document.querySelector('`+row("live-2")+`') === null`)
		v, err := bot.Verdict(ctx, agent, "live-2", 0)
		if err != nil || v.Decision != lineage.Deny {
			t.Fatalf("after reject: %+v %v, want deny", v, err)
		}
	})

	t.Run("an XSS arg shows as text and runs nothing", func(t *testing.T) {
		const pwn = `<script>window.__pwned = 1</script>`
		if _, err := bot.Request(ctx, agent, lineage.Request{ID: "xss-1", Tool: "wire", Args: map[string]any{"note": xss, "memo": pwn}}); err != nil {
			t.Fatal(err)
		}
		// Once through the live update, once through a fresh page.
		for _, how := range []string{"live", "reload"} {
			if how == "reload" {
				tb.do(t, chromedp.Navigate(e.url+"/"))
			}
			tb.waitFor(t, "the row ("+how+")", `document.querySelector('`+row("xss-1")+` code.args') !== null`)
			var args string
			tb.eval(t, `document.querySelector('`+row("xss-1")+` code.args').textContent`, &args)
			if !strings.Contains(args, xss) || !strings.Contains(args, pwn) {
				t.Errorf("%s: args shown as %q, want the characters %q and %q", how, args, xss, pwn)
			}
			var n int
			tb.eval(t, `document.querySelectorAll("#pending-rows img, #pending-rows script").length`, &n)
			if n != 0 {
				t.Errorf("%s: %d elements made from an agent's string", how, n)
			}
			var pwned bool
			tb.eval(t, `window.__pwned === 1`, &pwned)
			if pwned || tb.dialogs.Load() != 0 {
				t.Fatalf("%s: a script of the agent ran (dialogs %d)", how, tb.dialogs.Load())
			}
		}
	})

	t.Run("a 390 px page is usable", func(t *testing.T) {
		tb.do(t, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
		defer tb.do(t, chromedp.EmulateViewport(1000, 800))
		for _, path := range []string{"/", "/agents", "/agents/" + agent} {
			tb.do(t, chromedp.Navigate(e.url+path))
			tb.waitFor(t, path, `document.readyState === "complete"`)
			var res struct {
				Scroll, Client int
				Cut            []string
			}
			tb.eval(t, `(() => {
				const de = document.documentElement, w = de.clientWidth, cut = [];
				document.querySelectorAll("main *, header *").forEach(el => {
					const r = el.getBoundingClientRect();
					if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX === "visible" && el.clientWidth > 0) cut.push("overflowing " + el.tagName + "." + el.className + " " + el.scrollWidth + ">" + el.clientWidth);
					if (r.width > 0 && (r.left < -0.5 || r.right > w + 0.5)) cut.push(el.tagName + " " + (el.textContent || "").trim().slice(0, 40) + " right=" + Math.round(r.right));
				});
				return {Scroll: de.scrollWidth, Client: w, Cut: cut};
			})()`, &res)
			if res.Client != 390 || res.Scroll > res.Client || len(res.Cut) > 0 {
				t.Errorf("%s at 390 px: scrollWidth %d, clientWidth %d, cut off: %q", path, res.Scroll, res.Client, res.Cut)
			}
			if path == "/" {
				tb.screenshot(t, "inbox-390.png", 390, 600)
			}
		}
	})

	t.Run("inbox screenshot", func(t *testing.T) {
		other, _, bot2 := e.agent("research-agent")
		if _, err := bot2.Request(ctx, other, lineage.Request{ID: "fetch-42", Tool: "wire", Args: map[string]any{"url": "https://example.org/report.pdf"}}); err != nil {
			t.Fatal(err)
		}
		tb.do(t, chromedp.Navigate(e.url+"/"))
		tb.waitFor(t, "two rows", `document.querySelectorAll("#pending-rows tr").length === 2`)
		tb.screenshot(t, "inbox.png", 1000, 420)
	})

	t.Run("charts show the scripted agent's numbers", func(t *testing.T) {
		id, _, c := e.agent("scripted")
		script := []struct {
			tool   string
			amount int
		}{{"pay", 10}, {"pay", 500}, {"pay", 20}, {"pay", 999}, {"wire", 5}}
		for i, s := range script {
			if _, err := c.Request(ctx, id, lineage.Request{ID: fmt.Sprintf("s%d", i), Tool: s.tool, Args: map[string]any{"amount": s.amount}}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.admin.Approve(ctx, id, "s4"); err != nil {
			t.Fatal(err)
		}
		tb.do(t, chromedp.Navigate(e.url+"/agents/"+id))
		tb.waitFor(t, "the charts", `document.querySelector("#chart-scars") !== null`)
		type series struct {
			Values       []int
			Final, Limit string
			LimitText    string
			FinalText    string
		}
		read := func(chart string) series {
			var s series
			tb.eval(t, `(() => {
				const svg = document.getElementById("`+chart+`");
				return {
					Values: [...svg.querySelectorAll("circle.point")].map(c => +c.dataset.value),
					Final: svg.dataset.final, Limit: svg.dataset.limit,
					LimitText: svg.querySelector("text.limit-label").textContent,
					FinalText: svg.querySelector("text.final").textContent,
				};
			})()`, &s)
			return s
		}
		// seq 1 (policy) … 7 (the approval): allowed pay 1, scar 1, pay 1, scar 1, pending, approved wire 2.
		credits, scars := read("chart-credits"), read("chart-scars")
		if fmt.Sprint(credits.Values) != "[0 1 1 2 2 2 4]" || credits.Final != "4" || credits.Limit != "10" ||
			credits.LimitText != "budget 10" || credits.FinalText != "now 4" {
			t.Errorf("credits chart: %+v", credits)
		}
		if fmt.Sprint(scars.Values) != "[0 0 1 1 2 2 2]" || scars.Final != "2" || scars.Limit != "5" ||
			scars.LimitText != "scar limit 5" || scars.FinalText != "now 2" {
			t.Errorf("scar chart: %+v", scars)
		}
		var facts struct{ Budget, Scars, Verify string }
		tb.eval(t, `({Budget: document.getElementById("agent-budget").textContent, Scars: document.getElementById("agent-scars").textContent,
			Verify: document.getElementById("verify").textContent.replace(/\s+/g, " ").trim()})`, &facts)
		if facts.Budget != "4 spent, 6 left of 10" || !strings.HasPrefix(facts.Scars, "2 of 5") || !strings.Contains(facts.Verify, "ok 8 records") {
			t.Errorf("agent facts: %+v", facts)
		}
		// The timeline says each verdict in words, never by colour alone.
		var badges []string
		tb.eval(t, `[...document.querySelectorAll(".timeline .badge")].map(b => b.textContent.trim())`, &badges)
		want := []string{"✔ approved", "pending", "✖ denied, minor scar (+1)", "✔ allowed", "✖ denied, minor scar (+1)", "✔ allowed", "§ policy", "★ created"}
		if fmt.Sprintf("%q", badges) != fmt.Sprintf("%q", want) {
			t.Errorf("timeline badges %q, want %q", badges, want)
		}
		tb.screenshot(t, "agent.png", 1000, 800)
	})

	t.Run("kill switch", func(t *testing.T) {
		tb.do(t, chromedp.Navigate(e.url+"/agents/"+agent))
		tb.waitFor(t, "the kill switch", `document.querySelector(".kill button") !== null`)
		tb.do(t,
			chromedp.SendKeys(chromedp.CSS("#note"), "runaway"),
			chromedp.Click(chromedp.CSS(".kill input[type=checkbox]")),
			chromedp.Click(chromedp.CSS(".kill button")),
		)
		tb.waitFor(t, "the terminated agent", `document.getElementById("agent-status") && document.getElementById("agent-status").textContent.includes("terminated: killed")`)
		st, err := e.admin.State(ctx, agent)
		if err != nil || st.Status != lineage.Terminated {
			t.Fatalf("state after the kill switch: %+v %v", st, err)
		}
	})
}
