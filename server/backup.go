package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/lineage-guard/lineage/api"
)

// backup is GET /v1/backup: a consistent copy of the store as a tar stream
// (docs/operations.md, "Backups"). The manifest comes last: a stream cut
// short by an error is a tar without one, which restore refuses.
func (s *Server) backup(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	if len(r.URL.Query()) > 0 {
		return newError(api.CodeBadRequest, "GET /v1/backup takes no query parameters")
	}
	if s.cfg.Backup == nil {
		return newError(api.CodeNotFound,
			"this server's store is not the file store: back up PostgreSQL with pg_dump (docs/operations.md, Backups)")
	}
	// A copy of many logs takes longer than a response may.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="lineage-%s.tar"`, time.Now().UTC().Format("20060102T150405Z")))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := s.cfg.Backup(r.Context(), w); err != nil {
		s.log.Error("backup failed", "error", err.Error())
		panic(http.ErrAbortHandler) // the status is sent: cut the stream
	}
	return nil
}

// BackupFunc writes a backup of the server's store to w (runtime/backup).
type BackupFunc func(ctx context.Context, w io.Writer) error
