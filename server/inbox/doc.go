// Package inbox is the approval inbox of docs/inbox.md: the web pages that
// `lineagec serve` serves at / for approvers and admins.
//
// It owns the sign-in (a bearer token exchanged for a session cookie), the
// sessions and their CSRF tokens, the pages (pending requests, agents, an
// agent's state, timeline, charts, verify result and kill switch), their
// embedded templates, style sheet and script, and the security headers of
// every page. It decides nothing: verdicts, approvals and kills go through
// the Backend the service gives it (the same calls as the HTTP API), and
// live updates are the service's own server-sent events.
package inbox
