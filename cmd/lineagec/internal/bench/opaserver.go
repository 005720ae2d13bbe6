package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/open-policy-agent/opa/v1/logging"

	lineagerego "github.com/lineage-guard/lineage/rego"
)

// ServeOPA serves the Rego modules of policyDir (its *.rego files) with
// OPA's own server on addr until ctx ends (`lineagec bench opa-server`: what
// `opa run --server --log-level error policyDir` serves, from the OPA module
// lineage is built with). It says "serving on http://ADDR" on stderr once it
// listens.
func ServeOPA(ctx context.Context, addr, policyDir string, stderr io.Writer) error {
	files, err := filepath.Glob(filepath.Join(policyDir, "*.rego"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("bench opa-server: no .rego file in %s", policyDir)
	}
	slices.Sort(files)
	var modules []lineagerego.Module
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		modules = append(modules, lineagerego.Module{Name: filepath.Base(f), Source: string(src)})
	}
	logger := logging.New()
	logger.SetLevel(logging.Error)
	h, stop, err := opaHandler(ctx, modules, logger)
	if err != nil {
		return fmt.Errorf("bench opa-server: %w", err)
	}
	defer stop()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := newOPAHTTPServer(h)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(stderr, "lineagec: OPA serving %s on http://%s\n", policyDir, ln.Addr())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
