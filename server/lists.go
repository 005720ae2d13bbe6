package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
)

// What the paged lists share (docs/service.md): the query and the answer.

// listBody is the answer of a paged list: the rows and next_cursor (null
// after the last page).
type listBody map[string]any

func nextCursor(next string) any {
	if next == "" {
		return nil
	}
	return next
}

// listQuery reads a list's limit, cursor and (for agents) status.
func listQuery(r *http.Request, status bool) (runtime.ListQuery, error) {
	var q runtime.ListQuery
	known := "limit, cursor"
	if status {
		known += ", status"
	}
	for k, v := range r.URL.Query() {
		if len(v) != 1 {
			return q, newError(api.CodeBadRequest, fmt.Sprintf("query parameter %q given %d times", k, len(v)))
		}
		switch {
		case k == "limit":
			n, err := strconv.Atoi(v[0])
			if err != nil || n < 1 || n > store.MaxListLimit {
				return q, newError(api.CodeBadRequest, fmt.Sprintf("limit %q: expected a whole number from 1 to %d", v[0], store.MaxListLimit))
			}
			q.Limit = n
		case k == "cursor":
			q.Cursor = v[0]
		case k == "status" && status:
			if v[0] != store.StatusAlive && v[0] != store.StatusTerminated && v[0] != store.StatusDamaged {
				return q, newError(api.CodeBadRequest, fmt.Sprintf("status %q: expected alive, terminated or damaged", v[0]))
			}
			q.Status = v[0]
		default:
			return q, newError(api.CodeBadRequest, fmt.Sprintf("unknown query parameter %q (only %s)", k, known))
		}
	}
	return q, nil
}

// listError makes a cursor that no page gave a 400.
func listError(err error) error {
	if errors.Is(err, store.ErrBadCursor) {
		return newError(api.CodeBadRequest, "cursor: not a next_cursor of this list")
	}
	return err
}
