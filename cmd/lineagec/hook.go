package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/internal/strictjson"
	"github.com/lineage-guard/lineage/mcpproxy"
)

// `lineagec hook claude-code`: a Claude Code PreToolUse command hook
// (docs/hooks.md). Every tool call of the coding agent becomes a request of
// the agent whose token the hook has; it answers on stdout with the hook's
// JSON and always exits 0. Whatever goes wrong (no service, a bad token, an
// event it cannot read, a bad flag, a bug) it answers deny: a hook that fails
// lets Claude Code run the tool, so the hook itself never fails.

// defaultHookApprovalWait is how long a pending call waits for a person:
// under Claude Code's default hook timeout of 60 s.
const defaultHookApprovalWait = 50 * time.Second

// hookExchange bounds one exchange with the service (its retries included).
const hookExchange = 10 * time.Second

// maxHookEvent is the most of stdin the hook reads (a Write's content is in
// the event; the service itself refuses a request over 1 MiB).
const maxHookEvent = 64 << 20

type hookParams struct {
	*globalParams
	token      string
	wait       time.Duration
	allowSkips bool
	settings   bool
	stateDir   string
}

func newHookCmd(g *globalParams) *cobra.Command {
	hook := &cobra.Command{
		Use:   "hook",
		Short: "Guard a coding agent's own tools as its hook (claude-code)",
		Long: `hook runs as a coding agent's tool hook: each tool call the coding agent is
about to make becomes a request of a lineage agent.

  lineagec hook claude-code   a Claude Code PreToolUse command hook
` + exitCodesHelp,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	hook.AddCommand(newHookClaudeCodeCmd(g))
	return hook
}

func newHookClaudeCodeCmd(g *globalParams) *cobra.Command {
	p := hookParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "claude-code [--server URL] [--token TOKEN] [--approval-wait 50s] [--allow-skips-prompt] [--settings]",
		Short: "A Claude Code PreToolUse hook: every tool call is a request of an agent",
		Long: `claude-code reads a Claude Code hook event (JSON) on stdin and makes its
PreToolUse call a request of the agent whose token it has (--token, default
$LINEAGE_TOKEN) at the guard service (--server, default $LINEAGE_SERVER): the
tool is tool_name (Bash, Write, mcp__github__create_issue, …), the args are
tool_input. It answers on stdout and exits 0:

  allow    {} — Claude Code's own permission rules still apply
           (--allow-skips-prompt answers permissionDecision "allow" instead)
  deny     permissionDecision "deny" with the text a model reads
  pending  waits up to --approval-wait for a person; still pending, it
           denies naming the request id, and the same call later (same tool,
           same args) continues that request

When the service cannot be reached, the token is bad or the event cannot be
read, it denies: it never lets a call through that lineage did not allow.
Other events than PreToolUse are answered {}. The calls waiting for approval
are kept in --state-dir (default: the user's cache directory, lineage/hook).

--settings prints the .claude/settings.json fragment that installs the hook.
Exit status: always 0, the answer being on stdout (--settings: 1 on an error).`,
		// Arguments are checked in RunE: a misused hook answers deny (D271: the hook never fails open).
		Args: cobra.ArbitraryArgs,
		// The root refuses --server for commands it does not list; the hook
		// takes --server and opens no store itself.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			for _, name := range []string{"store", "data"} {
				if cmd.Flags().Changed(name) {
					return hookMisused(cmd, p, fmt.Errorf("%s opens no store (--%s): it asks the guard service at --server", cmd.CommandPath(), name))
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return hookMisused(cmd, p, fmt.Errorf("%s takes no arguments (got %q)\nusage: %s", cmd.CommandPath(), args, cmd.UseLine()))
			}
			if p.settings {
				return writeHookSettings(cmd.OutOrStdout(), p)
			}
			runHookClaudeCode(cmd.Context(), p, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.token, "token", "", "the agent's token (default $LINEAGE_TOKEN)")
	f.DurationVar(&p.wait, "approval-wait", defaultHookApprovalWait, "how long a call that needs approval waits for it")
	f.BoolVar(&p.allowSkips, "allow-skips-prompt", false, `answer an allowed call with permissionDecision "allow" (skips Claude Code's prompt) instead of {}`)
	f.BoolVar(&p.settings, "settings", false, "print the .claude/settings.json fragment that installs this hook, and exit")
	f.StringVar(&p.stateDir, "state-dir", "", "where the calls waiting for approval are kept (default: user cache dir, lineage/hook)")
	// A bad flag is a deny too (decision D271 (the hook never fails open)).
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return hookMisused(c, p, err) })
	return cmd
}

// hookMisused answers a hook run whose flags or arguments are wrong: a deny
// and exit 0 (D271 (the hook never fails open)), but an error for --settings,
// which a person runs.
func hookMisused(c *cobra.Command, p hookParams, err error) error {
	if p.settings {
		return err
	}
	writeHookAnswer(c.OutOrStdout(), hookDeny(fmt.Sprintf("lineage's hook is misconfigured (%v), so no call may run until it is fixed.", err)))
	fmt.Fprintf(c.ErrOrStderr(), "lineagec: %v\n", err)
	return &exitError{code: exitOK}
}

// hookEvent is what the hook reads of Claude Code's event; other members
// (session_id, transcript_path, cwd, permission_mode, …) are ignored.
type hookEvent struct {
	HookEventName *string         `json:"hook_event_name"`
	ToolName      string          `json:"tool_name"`
	ToolInput     json.RawMessage `json:"tool_input"`
	ToolUseID     string          `json:"tool_use_id"`
}

// hookOutput is the hook's answer: {} or a PreToolUse decision.
type hookOutput struct {
	HookSpecificOutput *hookDecision `json:"hookSpecificOutput,omitempty"`
}

type hookDecision struct {
	HookEventName            string `json:"hookEventName"`
	PermissionDecision       string `json:"permissionDecision"`
	PermissionDecisionReason string `json:"permissionDecisionReason"`
}

func hookDeny(reason string) hookOutput {
	return hookOutput{&hookDecision{"PreToolUse", "deny", reason}}
}

func writeHookAnswer(w io.Writer, out hookOutput) {
	_ = writeJSONLine(w, out)
}

// runHookClaudeCode answers one event. It never returns an error: every
// failure is a deny on stdout.
func runHookClaudeCode(ctx context.Context, p hookParams, stdin io.Reader, stdout, stderr io.Writer) {
	out := hookDeny("lineage's hook failed, so the call may not run.")
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "lineagec: internal error: %v (answered deny)\n", r)
			out = hookDeny(fmt.Sprintf("lineage's hook failed (internal error: %v), so the call may not run.", r))
		}
		writeHookAnswer(stdout, out)
	}()
	out = decideHook(ctx, p, stdin, stderr)
}

func decideHook(ctx context.Context, p hookParams, stdin io.Reader, stderr io.Writer) hookOutput {
	raw, err := io.ReadAll(io.LimitReader(stdin, maxHookEvent+1))
	if err == nil && len(raw) > maxHookEvent {
		err = fmt.Errorf("the event is over %d bytes", maxHookEvent)
	}
	var ev hookEvent
	if err == nil {
		// The one strict reader, D371 (the hook's event read strictly):
		// Claude Code's members exactly, the ones it adds skipped.
		err = strictjson.UnmarshalOpen(raw, &ev, 0)
	}
	if err == nil && ev.HookEventName == nil {
		err = errors.New("it has no hook_event_name")
	}
	if err != nil {
		fmt.Fprintf(stderr, "lineagec: hook: cannot read the event: %v\n", err)
		return hookDeny(fmt.Sprintf("lineage could not read the hook's event (%v), so the call may not run; nothing was done.", err))
	}
	if *ev.HookEventName != "PreToolUse" {
		return hookOutput{}
	}
	tool := ev.ToolName
	if tool == "" {
		return hookDeny("lineage could not read the hook's event (it has no tool_name), so the call may not run; nothing was done.")
	}
	args, canon, err := client.DecodeArgs(ev.ToolInput)
	if err != nil {
		return hookDeny(fmt.Sprintf("lineage could not read the call to %q (tool_input: %v), so it may not run; nothing was done.", tool, err))
	}
	unavailable := func(err error) hookOutput {
		fmt.Fprintf(stderr, "lineagec: hook: call to %q denied: %v\n", tool, err)
		var ce *api.Error
		switch {
		case errors.As(err, &ce) && ce.Status == http.StatusTooManyRequests:
			return hookDeny(fmt.Sprintf("lineage denied the call to %q: slow down, the agent is making requests faster than its quota allows (%s); nothing was done. Wait a little before calling again.", tool, ce.Message))
		case errors.As(err, &ce) && errors.Is(err, lineage.ErrBadRequest):
			return hookDeny(fmt.Sprintf("lineage refused the call to %q as malformed, and did not record it: %s. It may not run.", tool, strings.TrimSuffix(ce.Message, ".")))
		}
		return hookDeny(fmt.Sprintf("lineage could not get a decision on the call to %q (%v), so it may not run; nothing was done. Try again later.", tool, err))
	}
	srv := p.serverURL()
	tok := p.token
	if tok == "" {
		tok = os.Getenv("LINEAGE_TOKEN")
	}
	if srv == "" || tok == "" {
		return unavailable(errors.New("the hook has no guard service or no token: give --server and --token, or set $LINEAGE_SERVER and $LINEAGE_TOKEN"))
	}
	guard, err := client.New(srv, tok, nil)
	if err != nil {
		return unavailable(err)
	}
	xctx, cancel := context.WithTimeout(ctx, hookExchange)
	defer cancel()
	who, err := guard.WhoAmI(xctx)
	if err != nil {
		return unavailable(err)
	}
	if who.Agent == "" {
		return unavailable(fmt.Errorf("the token is a %s's, not an agent's", who.Role))
	}
	agent := who.Agent
	dir := p.stateDir
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return unavailable(fmt.Errorf("no --state-dir and no user cache directory: %w", err))
		}
		dir = filepath.Join(cache, "lineage", "hook")
	}
	calls, err := mcpproxy.OpenCallsAt(dir, agent)
	if err != nil {
		return unavailable(err)
	}
	// The call's request: the open one of the same call (same tool, same
	// canonical args), else a new one (decision D272 (a call continues its
	// request)).
	key := client.CallKey(tool, canon)
	id, err := calls.Lookup(key)
	if err != nil {
		return unavailable(err)
	}
	recorded := id != ""
	var v lineage.Verdict
	if recorded {
		v, err = guard.Verdict(xctx, agent, id, 0)
		if errors.Is(err, lineage.ErrUnknownRequest) {
			if err := calls.Drop(key, id); err != nil {
				return unavailable(err)
			}
			recorded, err = false, nil
		}
		if err != nil {
			return unavailable(err)
		}
	}
	if !recorded {
		id = hookRequestID(key)
		v, err = guard.Request(xctx, agent, lineage.Request{ID: id, Tool: tool, Args: args})
		if err != nil {
			return unavailable(err)
		}
		if v.Decision == lineage.Pending {
			if err := calls.Open(key, id); err != nil {
				return unavailable(err)
			}
			recorded = true
		}
	}
	deadline := time.Now().Add(p.wait)
	for v.Decision == lineage.Pending {
		rem := time.Until(deadline).Truncate(time.Millisecond)
		if rem <= 0 {
			break
		}
		wctx, wcancel := context.WithTimeout(ctx, min(rem, hookMaxWait)+hookExchange)
		v, err = guard.Verdict(wctx, agent, id, min(rem, hookMaxWait))
		wcancel()
		if err != nil {
			return unavailable(err)
		}
	}
	switch v.Decision {
	case lineage.Pending:
		return hookDeny(fmt.Sprintf(
			"lineage holds the call to %q for a person's approval: a person must approve request %s (lineagec approve %s %s, or the inbox). It was not run. Making the same call again, with the same arguments, continues that request instead of making a new one; meanwhile you may do something else.",
			tool, v.RequestID, agent, v.RequestID))
	case lineage.Allow:
		took, err := calls.Claim(key, id, recorded)
		if err != nil {
			return unavailable(err)
		}
		if !took {
			return hookDeny(fmt.Sprintf(
				"The approved request %s for %q was used by another call with the same arguments; this call may not run on it. Call it again to make a new request.", id, tool))
		}
		if p.allowSkips {
			return hookOutput{&hookDecision{"PreToolUse", "allow", fmt.Sprintf("lineage allowed the call (request %s)", v.RequestID)}}
		}
		return hookOutput{}
	default:
		if recorded {
			if err := calls.Drop(key, id); err != nil {
				fmt.Fprintf(stderr, "lineagec: hook: forgetting the open call %s: %v\n", id, err)
			}
		}
		var st *lineage.State
		if v.Reason != "terminated" {
			if s, err := guard.State(xctx, agent); err == nil {
				st = &s
			}
		}
		return hookDeny(client.DenyText(tool, v, st, nil))
	}
}

// hookMaxWait is the longest ?wait= the service holds (docs/service.md).
const hookMaxWait = 60 * time.Second

// hookRequestID is a fresh request id for a call key: "cc-", 16 hex digits of
// the key, "-", 16 random hex digits.
func hookRequestID(key string) string {
	var r [8]byte
	_, _ = rand.Read(r[:])
	return "cc-" + key[:16] + "-" + hex.EncodeToString(r[:])
}

// writeHookSettings prints the .claude/settings.json fragment: every tool
// (matcher "*") runs the hook with these flags, under a timeout above the
// approval wait. The token is never written into it: the hook reads
// $LINEAGE_TOKEN from the environment Claude Code runs it in.
func writeHookSettings(w io.Writer, p hookParams) error {
	if p.token != "" {
		return errors.New("--settings never writes a token into settings (a project's .claude/settings.json is often committed): set $LINEAGE_TOKEN where Claude Code runs")
	}
	command := "lineagec hook claude-code"
	if s := p.srv.server; s != "" {
		command += " --server " + shellQuote(s)
	}
	if p.wait != defaultHookApprovalWait {
		command += " --approval-wait " + p.wait.String()
	}
	if p.allowSkips {
		command += " --allow-skips-prompt"
	}
	if p.stateDir != "" {
		command += " --state-dir " + shellQuote(p.stateDir)
	}
	timeout := int((p.wait+hookExchange)/time.Second) + 1
	type hookCmd struct {
		Type    string `json:"type"`
		Command string `json:"command"`
		Timeout int    `json:"timeout"`
	}
	type matcher struct {
		Matcher string    `json:"matcher"`
		Hooks   []hookCmd `json:"hooks"`
	}
	doc := map[string]any{"hooks": map[string]any{"PreToolUse": []matcher{{
		Matcher: "*", Hooks: []hookCmd{{Type: "command", Command: command, Timeout: timeout}},
	}}}}
	return writeJSONIndent(w, doc)
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@=%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
