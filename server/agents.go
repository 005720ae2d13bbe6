package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
)

// The agent routes: create, list, read (state, policy, log), verify and
// terminate an agent.

func (s *Server) createAgent(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	var b api.CreateBody
	if err := readBody(w, r, &b); err != nil {
		return badRequest(err)
	}
	if len(b.Policy) == 0 || bytes.Equal(b.Policy, []byte("null")) {
		return newError(api.CodeBadRequest, "/policy: a policy document is required")
	}
	if b.Policy[0] != '{' {
		return newError(api.CodeBadRequest, "/policy: expected an object")
	}
	if d := regoPaths(b.Policy); len(d) > 0 {
		return invalidPolicy(d)
	}
	c, err := compiler.Compile("", b.Policy)
	if err != nil {
		var list diag.List
		if errors.As(err, &list) {
			return invalidPolicy(list)
		}
		return newError(api.CodeInvalidPolicy, err.Error())
	}
	opts := runtime.CreateOptions{Name: b.Name}
	if b.Parent != "" {
		if !agentIDPattern.MatchString(b.Parent) {
			return newError(api.CodeUnknownAgent, fmt.Sprintf("parent %q is not an agent id", b.Parent))
		}
		opts.Parent = &lineage.Parent{Agent: b.Parent}
	}
	id, err := s.rt.CreateAgent(r.Context(), c, opts)
	if err != nil {
		return err
	}
	s.names.Store(id, b.Name)
	return writeJSON(w, http.StatusCreated, api.Created{Agent: id, Token: s.auth.Load().agentToken(id), Digest: c.Digest})
}

// regoPaths refuses extension modules given by path: over the network a
// policy inlines its Rego as source, so that a caller can never make the
// server read its own files (D74: policies over the network inline their Rego).
func regoPaths(doc []byte) diag.List {
	var p struct {
		Rego []map[string]json.RawMessage `json:"rego"`
	}
	if json.Unmarshal(doc, &p) != nil {
		return nil // the compiler reports what is wrong
	}
	var out diag.List
	for i, m := range p.Rego {
		if _, ok := m["path"]; ok {
			out = append(out, diag.Diagnostic{Code: diag.CodeSchema, Pointer: fmt.Sprintf("/rego/%d/path", i),
				Message: "a policy sent to the service must inline its Rego extensions as {source}; a path would be read from the server's disk"})
		}
	}
	return out
}

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	q, err := listQuery(r, true)
	if err != nil {
		return err
	}
	list, next, err := s.rt.ListAgents(q)
	if err != nil {
		return listError(err)
	}
	rows := make([]api.Agent, 0, len(list))
	for _, a := range list {
		rows = append(rows, api.Agent{Agent: a.Agent, Name: a.Name, Status: a.Status, Digest: a.Digest, Seq: a.Seq, Error: a.Error})
	}
	return writeJSON(w, http.StatusOK, listBody{"agents": rows, "next_cursor": nextCursor(next)})
}

func (s *Server) state(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	agent := r.PathValue("agent")
	st, err := s.rt.State(r.Context(), agent)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}

func (s *Server) policy(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	agent := r.PathValue("agent")
	info, err := s.rt.Info(r.Context(), agent)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.PolicyAnswer{Digest: info.Digest, Policy: info.Policy})
}

func (s *Server) terminate(w http.ResponseWriter, r *http.Request, p api.Principal) error {
	agent := r.PathValue("agent")
	var b api.TerminateBody
	if r.ContentLength != 0 {
		if err := readBody(w, r, &b); err != nil && !strings.HasPrefix(err.Error(), "the body is empty") {
			return badRequest(err)
		}
	}
	st, err := s.rt.Terminate(r.Context(), agent, runtime.Kill{By: p.Name, Note: b.Reason})
	if err != nil {
		return err
	}
	s.announceTermination(agent, lineage.Killed, p.Name)
	return writeJSON(w, http.StatusOK, st)
}

func (s *Server) logLines(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	agent := r.PathValue("agent")
	var from uint64
	q := r.URL.Query()
	for k := range q {
		if k != "from" {
			return newError(api.CodeBadRequest, fmt.Sprintf("unknown query parameter %q (only from)", k))
		}
	}
	if fs := q.Get("from"); fs != "" {
		n, err := strconv.ParseUint(fs, 10, 64)
		if err != nil {
			return newError(api.CodeBadRequest, fmt.Sprintf("from=%q: a record seq, 0 or more", fs))
		}
		from = n
	}
	started := false
	err := s.rt.ScanLog(r.Context(), agent, from, func(_ uint64, line []byte) error {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		_, err := w.Write([]byte{'\n'})
		return err
	})
	if err != nil {
		return err // after the first line the status is sent: the stream just ends
	}
	if !started {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	}
	return nil
}

func (s *Server) verify(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	res, err := s.verifyOf(r.PathValue("agent"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

func (s *Server) verifyOf(agent string) (api.VerifyResult, error) {
	recs, err := s.rt.Records(agent)
	return VerifyResultOf(agent, recs, err, s.cfg.Marks)
}

// VerifyResultOf is verify's answer for an agent's log read as recs with
// readErr (runtime.Records or runtime.VerifyLog: the records intact up to
// the first bad one, and a *runtime.ChainError or *store.DamageError naming
// it), checked against the last checkpoint marks keeps of it (nil: none).
// It is the one shape of the answer for GET /v1/agents/{agent}/verify, the
// inbox and `lineagec verify` on a local store, so that one log reads the
// same at every hop: the intact records and their head, then ok or the
// first bad seq and why. An error that is not damage is returned.
func VerifyResultOf(agent string, recs []lineage.Record, readErr error, marks store.Marks) (api.VerifyResult, error) {
	n := len(recs)
	res := api.VerifyResult{Records: &n}
	if n > 0 {
		res.Head = recs[n-1].Hash
	}
	var chain *runtime.ChainError
	var damage *store.DamageError
	switch {
	case errors.As(readErr, &chain):
		res.Seq, res.Message = &chain.Seq, chain.Reason
		return res, nil
	case errors.As(readErr, &damage):
		res.Seq, res.Message = &damage.Seq, damage.Reason
		return res, nil
	case readErr != nil:
		return api.VerifyResult{}, readErr
	case n < 2:
		// A log is at least genesis and policy (an empty file is a Create
		// whose first append never happened).
		seq := uint64(n)
		res.Seq, res.Message = &seq, "log ends before its policy record"
		return res, nil
	}
	if marks != nil {
		mark, err := marks.LoadMark(agent)
		if errors.As(err, &damage) {
			res.Seq, res.Message = &damage.Seq, damage.Reason
			return res, nil
		}
		if err != nil {
			return api.VerifyResult{}, err
		}
		if why := mark.Shortfall(uint64(n), func(seq uint64) string { return recs[seq].Hash }); why != "" {
			seq := min(uint64(n), mark.Size-1)
			res.Seq, res.Message = &seq, api.CodeCheckpointDiverged+": "+why
			return res, nil
		}
	}
	res.OK = true
	return res, nil
}
