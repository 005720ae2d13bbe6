// Command lineageclient drives a lineage service with the client oapi-codegen
// generated from its OpenAPI document: it creates an agent under a policy,
// asks for one decision the policy allows and one it denies, and asks for
// an unknown agent; it prints what it got as one JSON object.
//
// Usage: lineageclient URL ADMIN_TOKEN POLICY_JSON
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"example.com/lineageclient/lineageapi"
)

type result struct {
	Agent   string               `json:"agent"`
	Allowed lineageapi.Verdict   `json:"allowed"`
	Denied  lineageapi.Verdict   `json:"denied"`
	Unknown lineageapi.Error     `json:"unknown"`
	Status  map[string]int       `json:"status"`
	Whoami  lineageapi.Principal `json:"whoami"`
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "lineageclient:", err)
		os.Exit(1)
	}
}

func bearer(token string) lineageapi.ClientOption {
	return lineageapi.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	})
}

func run(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("usage: lineageclient URL ADMIN_TOKEN POLICY_JSON")
	}
	base, adminToken := args[0], args[1]
	var policy map[string]any
	if err := json.Unmarshal([]byte(args[2]), &policy); err != nil {
		return fmt.Errorf("the policy: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := lineageapi.NewClientWithResponses(base, bearer(adminToken))
	if err != nil {
		return err
	}
	out := result{Status: map[string]int{}}

	name := "generated-client"
	created, err := admin.CreateAgentWithResponse(ctx, lineageapi.CreateAgentJSONRequestBody{Policy: policy, Name: &name})
	if err != nil {
		return fmt.Errorf("createAgent: %w", err)
	}
	if created.JSON201 == nil {
		return fmt.Errorf("createAgent: %d %s", created.StatusCode(), created.Body)
	}
	out.Agent = created.JSON201.Agent

	// The agent decides with its own token, as an agent would.
	agent, err := lineageapi.NewClientWithResponses(base, bearer(created.JSON201.Token))
	if err != nil {
		return err
	}
	me, err := agent.WhoamiWithResponse(ctx)
	if err != nil || me.JSON200 == nil {
		return fmt.Errorf("whoami: %v %v", err, me)
	}
	out.Whoami = *me.JSON200

	decide := func(amount int) (lineageapi.Verdict, error) {
		args := map[string]any{"amount": amount}
		res, err := agent.DecideWithResponse(ctx, out.Agent, lineageapi.DecideJSONRequestBody{Tool: "pay", Args: &args})
		if err != nil {
			return lineageapi.Verdict{}, fmt.Errorf("decide: %w", err)
		}
		if res.JSON200 == nil {
			return lineageapi.Verdict{}, fmt.Errorf("decide: %d %s", res.StatusCode(), res.Body)
		}
		return *res.JSON200, nil
	}
	if out.Allowed, err = decide(50); err != nil {
		return err
	}
	if out.Denied, err = decide(500); err != nil {
		return err
	}

	// An error comes back typed, with the error schema's code.
	unknown, err := admin.GetAgentWithResponse(ctx, "agt_nobody")
	if err != nil {
		return fmt.Errorf("getAgent: %w", err)
	}
	out.Status["getAgent unknown"] = unknown.StatusCode()
	if unknown.JSON404 == nil {
		return fmt.Errorf("getAgent of an unknown agent: %d %s", unknown.StatusCode(), unknown.Body)
	}
	out.Unknown = *unknown.JSON404
	return json.NewEncoder(os.Stdout).Encode(out)
}
