// Package client is the Go client of the guard service's HTTP API (docs/service.md,
// package server): typed verdicts, states and errors (the wire's types are
// package api's), retries of the calls
// that are safe to repeat, and the caller's context deadlines. The CLI's
// --server mode and the MCP proxy speak to the service through it; it never
// opens a store.
package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/lineage-guard/lineage/api"

	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lineage-guard/lineage"
)

// Client calls one guard service with one token. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
	// Retries is how many times a call that is safe to repeat is tried again
	// after a network error or a 503 (default 3); backoff doubles from 100 ms.
	// A 429 (the agent's request quota, docs/service.md) recorded nothing, so
	// any call is tried again after it, as many times, once the Retry-After
	// the server gives has passed.
	Retries int
	// MaxRetryAfter is the longest Retry-After a call waits for (default 5 s):
	// a 429 asking for longer is returned at once (errors.Is
	// lineage.ErrTooManyRequests).
	MaxRetryAfter time.Duration
}

// New returns a client of the service at baseURL (http://127.0.0.1:8181)
// with a bearer token. hc nil means a client of its own.
func New(baseURL, token string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: %q is not an http(s) URL of a lineage server", baseURL)
	}
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
		}}
	}
	return &Client{base: u, token: token, hc: hc, Retries: 3, MaxRetryAfter: 5 * time.Second}, nil
}

// call is one HTTP exchange: body (if not nil) as JSON, the answer decoded
// into out (if not nil) when the status is want. retry says whether the call
// may be repeated.
func (c *Client) call(ctx context.Context, method, path string, query url.Values, body, out any, want int, retry bool) error {
	resp, err := c.do(ctx, method, path, query, body, retry)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return readError(resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("client: %s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// do sends a request, trying again (when retry) after network errors and 503s.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body any, retry bool) (*http.Response, error) {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("client: encoding the body: %w", err)
		}
		payload = b
	}
	u := *c.base
	unescaped, err := url.PathUnescape(path)
	if err != nil {
		return nil, fmt.Errorf("client: bad path %q: %w", path, err)
	}
	u.Path = c.base.Path + unescaped
	u.RawPath = c.base.Path + path
	if query != nil {
		u.RawQuery = query.Encode()
	}
	backoff := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		var rd io.Reader
		if payload != nil {
			rd = bytes.NewReader(payload)
		}
		req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		if payload != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Accept", "application/json")
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := c.hc.Do(req)
		wait := backoff
		again := retry && attempt < c.Retries && ctx.Err() == nil &&
			(err != nil || resp.StatusCode == http.StatusServiceUnavailable)
		if err == nil && resp.StatusCode == http.StatusTooManyRequests && attempt < c.Retries && ctx.Err() == nil {
			// Over the quota: nothing was recorded, so the same call (the
			// same request id) is safe to send again once the server says.
			wait, again = c.retryAfter(resp.Header.Get("Retry-After"))
		}
		if !again {
			if err != nil {
				return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
			}
			return resp, nil
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("client: %s %s: %w", method, path, ctx.Err())
		case <-time.After(wait):
		}
		backoff *= 2
	}
}

// retryAfter reads a 429's Retry-After (whole seconds) and says whether to
// wait that long: not when it is missing, malformed or over MaxRetryAfter.
func (c *Client) retryAfter(h string) (time.Duration, bool) {
	secs, err := strconv.ParseUint(strings.TrimSpace(h), 10, 32)
	if err != nil {
		return 0, false
	}
	limit := c.MaxRetryAfter
	if limit <= 0 {
		limit = 5 * time.Second
	}
	d := time.Duration(secs) * time.Second
	if d > limit {
		return 0, false
	}
	return d, true
}

// seg escapes one path segment (an id may hold any character, '/' included).
func seg(s string) string { return url.PathEscape(s) }

func readError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	e := &api.Error{Status: resp.StatusCode}
	if json.Unmarshal(b, e) != nil || e.Code == "" {
		e.Code = strings.ToLower(strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "_"))
		e.Message = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return e
}

// CreateAgent creates an agent under a policy document (JSON). Admin only. Not retried.
func (c *Client) CreateAgent(ctx context.Context, policy json.RawMessage, name, parent string) (api.Created, error) {
	body := api.CreateBody{Policy: policy, Name: name, Parent: parent}
	var out api.Created
	err := c.call(ctx, "POST", "/v1/agents", nil, body, &out, http.StatusCreated, false)
	return out, err
}

// Page asks for one page of a list (docs/service.md): at most Limit rows
// (the server's default if 0, at most 1000), after Cursor (the NextCursor
// of the page before, "" for the first), and for agents of Status ("" any).
type Page struct {
	Limit  int
	Cursor string
	Status string
}

func (p Page) query() url.Values {
	q := url.Values{}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	if p.Status != "" {
		q.Set("status", p.Status)
	}
	return q
}

// AgentsPage returns one page of agents and the cursor of the next ("" after
// the last).
func (c *Client) AgentsPage(ctx context.Context, p Page) ([]api.Agent, string, error) {
	var out struct {
		Agents []api.Agent `json:"agents"`
		Next   *string     `json:"next_cursor"`
	}
	err := c.call(ctx, "GET", "/v1/agents", p.query(), nil, &out, http.StatusOK, true)
	if err != nil || out.Next == nil {
		return out.Agents, "", err
	}
	return out.Agents, *out.Next, nil
}

// Agents lists every agent, reading every page.
func (c *Client) Agents(ctx context.Context) ([]api.Agent, error) {
	return allPages(ctx, c.AgentsPage, "")
}

// allPages reads every page of a list, the largest pages the server gives.
func allPages[T any](ctx context.Context, page func(context.Context, Page) ([]T, string, error), status string) ([]T, error) {
	var all []T
	p := Page{Limit: 1000, Status: status}
	for {
		rows, next, err := page(ctx, p)
		if err != nil {
			return nil, err
		}
		all = append(all, rows...)
		if next == "" {
			if all == nil {
				all = []T{}
			}
			return all, nil
		}
		p.Cursor = next
	}
}

// WhoAmI returns the caller's principal.
func (c *Client) WhoAmI(ctx context.Context) (api.Principal, error) {
	var out api.Principal
	err := c.call(ctx, "GET", "/v1/whoami", nil, nil, &out, http.StatusOK, true)
	return out, err
}

// State returns an agent's folded state.
func (c *Client) State(ctx context.Context, agent string) (lineage.State, error) {
	var out lineage.State
	err := c.call(ctx, "GET", "/v1/agents/"+seg(agent), nil, nil, &out, http.StatusOK, true)
	return out, err
}

// Policy returns an agent's normalized policy and its digest.
func (c *Client) Policy(ctx context.Context, agent string) (digest string, policy json.RawMessage, err error) {
	var out api.PolicyAnswer
	err = c.call(ctx, "GET", "/v1/agents/"+seg(agent)+"/policy", nil, nil, &out, http.StatusOK, true)
	return out.Digest, out.Policy, err
}

// Request asks the guard to decide a request. A request without an id is
// given one (NewRequestID), so that every call is retried with its id after a
// network error or a 503, unknown_outcome included: the id makes a retry
// safe (docs/decision-order.md step 1), and the retry answers the recorded
// verdict or decides afresh if nothing was recorded (docs/stores.md, D351 (the Go client names every request)
// (the Go client names every request)). req.At must be zero: the server's
// clock gives the time.
func (c *Client) Request(ctx context.Context, agent string, req lineage.Request) (lineage.Verdict, error) {
	if !req.At.IsZero() {
		return lineage.Verdict{}, fmt.Errorf("%w: the server's clock gives the time of a request", lineage.ErrBadRequest)
	}
	if req.ID == "" {
		req.ID = NewRequestID()
	}
	body := api.RequestBody{ID: req.ID, Tool: req.Tool, Args: req.Args}
	var out lineage.Verdict
	err := c.call(ctx, "POST", "/v1/agents/"+seg(agent)+"/requests", nil, body, &out, http.StatusOK, true)
	return out, err
}

// NewRequestID returns a fresh request id, "go_" and 24 random hex digits,
// for a call whose caller gave none.
func NewRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "go_" + hex.EncodeToString(b[:])
}

// Verdict returns a request's current verdict; wait > 0 holds a pending one
// until it is decided or wait (at most 60 s) passes.
func (c *Client) Verdict(ctx context.Context, agent, id string, wait time.Duration) (lineage.Verdict, error) {
	var q url.Values
	if wait > 0 {
		q = url.Values{"wait": {wait.String()}}
	}
	var out lineage.Verdict
	err := c.call(ctx, "GET", "/v1/agents/"+seg(agent)+"/requests/"+seg(id), q, nil, &out, http.StatusOK, true)
	return out, err
}

// Approve approves a pending request as the caller. Not retried: a repeat is not_pending.
func (c *Client) Approve(ctx context.Context, agent, id string) (lineage.Verdict, error) {
	return c.ApproveWithNote(ctx, agent, id, "")
}

// ApproveWithNote approves a pending request as the caller with a note (at
// most 256 characters, kept in the approval record; "" for none). Not retried.
func (c *Client) ApproveWithNote(ctx context.Context, agent, id, note string) (lineage.Verdict, error) {
	var out lineage.Verdict
	err := c.call(ctx, "POST", "/v1/agents/"+seg(agent)+"/requests/"+seg(id)+"/approve", nil, noteBody(note), &out, http.StatusOK, false)
	return out, notPendingToo(err)
}

// noteBody is the body of approve and reject: none without a note.
func noteBody(note string) any {
	if note == "" {
		return nil
	}
	return api.NoteBody{Note: note}
}

// notPendingToo makes the unknown_request of an approval or a rejection
// match lineage.ErrNotPending as well, as the runtime's error does (D303 (approving a request never made)
// (approving a request never made)).
func notPendingToo(err error) error {
	var ce *api.Error
	if errors.As(err, &ce) && ce.Code == api.CodeUnknownRequest {
		return unknownRequest{ce}
	}
	return err
}

// unknownRequest is an unknown_request answer to an approval or a rejection.
type unknownRequest struct{ e *api.Error }

func (u unknownRequest) Error() string        { return u.e.Error() }
func (u unknownRequest) Unwrap() error        { return u.e }
func (u unknownRequest) Is(target error) bool { return target == lineage.ErrNotPending }

// Reject rejects a pending request as the caller. Not retried.
func (c *Client) Reject(ctx context.Context, agent, id string) (lineage.Verdict, error) {
	return c.RejectWithNote(ctx, agent, id, "")
}

// RejectWithNote rejects a pending request as the caller with a note (at most
// 256 characters, kept in the approval record and shown to the agent; "" for
// none). Not retried.
func (c *Client) RejectWithNote(ctx context.Context, agent, id, note string) (lineage.Verdict, error) {
	var out lineage.Verdict
	err := c.call(ctx, "POST", "/v1/agents/"+seg(agent)+"/requests/"+seg(id)+"/reject", nil, noteBody(note), &out, http.StatusOK, false)
	return out, notPendingToo(err)
}

// Terminate pulls the kill switch as the caller; reason is free text. Not retried.
func (c *Client) Terminate(ctx context.Context, agent, reason string) (lineage.State, error) {
	var body any
	if reason != "" {
		body = api.TerminateBody{Reason: reason}
	}
	var out lineage.State
	err := c.call(ctx, "POST", "/v1/agents/"+seg(agent)+"/terminate", nil, body, &out, http.StatusOK, false)
	return out, err
}

// Log returns the records of an agent's log from seq from on, byte for byte
// as stored: one JSON line each.
func (c *Client) Log(ctx context.Context, agent string, from uint64) ([]byte, error) {
	var q url.Values
	if from > 0 {
		q = url.Values{"from": {strconv.FormatUint(from, 10)}}
	}
	resp, err := c.do(ctx, "GET", "/v1/agents/"+seg(agent)+"/log", q, nil, true)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, readError(resp)
	}
	return io.ReadAll(resp.Body)
}

// Verify recomputes an agent's chain on the server.
func (c *Client) Verify(ctx context.Context, agent string) (api.VerifyResult, error) {
	var out api.VerifyResult
	err := c.call(ctx, "GET", "/v1/agents/"+seg(agent)+"/verify", nil, nil, &out, http.StatusOK, true)
	return out, err
}

// PendingPage returns one page of pending requests and the cursor of the
// next ("" after the last).
func (c *Client) PendingPage(ctx context.Context, p Page) ([]api.Pending, string, error) {
	var out struct {
		Pending []api.Pending `json:"pending"`
		Next    *string       `json:"next_cursor"`
	}
	p.Status = ""
	err := c.call(ctx, "GET", "/v1/pending", p.query(), nil, &out, http.StatusOK, true)
	if err != nil || out.Next == nil {
		return out.Pending, "", err
	}
	return out.Pending, *out.Next, nil
}

// Pending lists every pending request, reading every page.
func (c *Client) Pending(ctx context.Context) ([]api.Pending, error) {
	return allPages(ctx, c.PendingPage, "")
}

// Health returns nil when the server's store is usable.
func (c *Client) Health(ctx context.Context) error {
	return c.call(ctx, "GET", "/health", nil, nil, nil, http.StatusOK, false)
}

// Events streams the server's events to fn until ctx ends, the server ends
// the stream, or fn returns an error (which Events returns).
func (c *Client) Events(ctx context.Context, fn func(api.Event) error) error {
	resp, err := c.do(ctx, "GET", "/v1/events", nil, nil, false)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 2<<20)
	var ev api.Event
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.Type != "" {
				if err := fn(ev); err != nil {
					return err
				}
			}
			ev = api.Event{}
		case strings.HasPrefix(line, "event: "):
			ev.Type = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.Data = append(ev.Data, strings.TrimPrefix(line, "data: ")...)
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return err
	}
	return ctx.Err()
}
