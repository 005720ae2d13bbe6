package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/internal/source"
	"github.com/lineage-guard/lineage/server"
)

// serveConfigPaths are the flags of serve that name files or directories:
// in a config file a relative one is relative to the file's directory,
// D332 (config paths are relative to the config file).
var serveConfigPaths = map[string]bool{
	"data": true, "auth": true, "server-key": true, "tls-cert": true, "tls-key": true, "checkpoint-key": true,
}

// serveConfigNotKeys are the flags of serve a config file cannot hold
// (--cpuprofile and --memory-store are hidden: bench serve's, not an
// operator's; a memory store in a config file would make no 200 durable).
var serveConfigNotKeys = map[string]bool{"config": true, "help": true, "cpuprofile": true, "memory-store": true}

// applyServeConfig reads serve's --config FILE (JSON or YAML, validated by
// schema/serve.schema.json: unknown keys are errors with file:line:col) and
// sets each flag it names that the command line did not: a flag given on the
// command line wins, D330 (a config file holds serve's flags).
func applyServeConfig(cmd *cobra.Command, file string) error {
	if file == "" {
		return nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--config %s:\n%w", file, diag.List{{Code: diag.CodeIO, Position: diag.Position{File: file}, Message: err.Error()}})
	}
	doc, diags := source.Load(file, data)
	if len(diags) == 0 {
		diags = source.Validate(doc, "serve")
	}
	if len(diags) > 0 {
		return fmt.Errorf("--config %s:\n%w", file, diags)
	}
	values, _ := doc.Value.(map[string]any)
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "$schema" {
			continue
		}
		ptr := "/" + name
		f := cmd.Flags().Lookup(name)
		if f == nil || serveConfigNotKeys[name] {
			// The schema and the flags disagree: still an unknown key.
			diags = append(diags, diag.Diagnostic{Code: diag.CodeUnknownField, Pointer: ptr, Position: doc.KeyPos(ptr),
				Message: fmt.Sprintf("serve has no flag --%s", name)})
			continue
		}
		if f.Changed {
			continue // the command line wins
		}
		var text string
		switch v := values[name].(type) {
		case string:
			text = v
			if serveConfigPaths[name] && v != "" && !filepath.IsAbs(v) {
				text = filepath.Join(filepath.Dir(file), v)
			}
		case json.Number:
			text = v.String()
		case bool:
			text = strconv.FormatBool(v)
		default:
			diags = append(diags, diag.Diagnostic{Code: diag.CodeSchema, Pointer: ptr, Position: doc.Pos(ptr),
				Message: fmt.Sprintf("--%s takes a single value", name)})
			continue
		}
		if err := cmd.Flags().Set(name, text); err != nil {
			diags = append(diags, diag.Diagnostic{Code: diag.CodeSchema, Pointer: ptr, Position: doc.Pos(ptr),
				Message: fmt.Sprintf("--%s: %v", name, err)})
		}
	}
	if len(diags) > 0 {
		return fmt.Errorf("--config %s:\n%w", file, diags)
	}
	return nil
}

// logLevel is the slog level of --log-level.
func logLevel(name string) (slog.Level, error) {
	switch name {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown --log-level %q (want debug, info, warn, error)", name)
}

// readKeyRing reads the server key file again (on SIGHUP): unlike at start a
// missing file is not made, and a file others may read is refused.
func readKeyRing(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %04o); make it 0600", path, info.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if _, err := server.KeysFrom(b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// reloadOnHUP re-reads the auth file (if any) and the server key ring on
// each SIGHUP and gives both to srv at once; a file that does not validate is
// refused with a log line and the previous principals and keys stay,
// D334 (SIGHUP reloads the auth file and the key ring), and the TLS
// certificate, D338 (SIGHUP reloads the TLS certificate). Without --auth the
// principals are the ones of the start (admin.token). The returned stop ends it.
func reloadOnHUP(srv *server.Server, log *slog.Logger, authFile, keyFile string, fixed []server.Entry, certs *tlsCerts) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-hup:
			}
			principals := fixed
			if authFile != "" {
				entries, err := server.LoadAuth(authFile)
				if err != nil {
					log.Error("reload refused: the previous principals and keys stay", "file", authFile, "error", err.Error())
					continue
				}
				principals = entries
			}
			cert, err := certs.load()
			if err != nil {
				log.Error("reload refused: the previous principals and keys stay", "file", certs.certFile, "error", err.Error())
				continue
			}
			key, err := readKeyRing(keyFile)
			if err == nil {
				err = srv.Reload(principals, key)
			}
			if err != nil {
				log.Error("reload refused: the previous principals and keys stay", "file", keyFile, "error", err.Error())
				continue
			}
			certs.set(cert)
			keys, _ := server.KeysFrom(key)
			log.Info("reloaded", "auth", authFile, "principals", len(principals), "server_key", keyFile, "keys", len(keys), "tls_cert", certs.file())
		}
	}()
	return func() { signal.Stop(hup); close(done) }
}

// tlsCerts is serve's TLS certificate, read at start and again on SIGHUP; a
// nil *tlsCerts is plain HTTP.
type tlsCerts struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
}

// loadTLSCerts reads --tls-cert and --tls-key; both "" is plain HTTP (nil).
func loadTLSCerts(certFile, keyFile string) (*tlsCerts, error) {
	if certFile == "" {
		return nil, nil
	}
	c := &tlsCerts{certFile: certFile, keyFile: keyFile}
	cert, err := c.load()
	if err != nil {
		return nil, err
	}
	c.set(cert)
	return c, nil
}

// load reads the certificate and its key; nil for plain HTTP.
func (c *tlsCerts) load() (*tls.Certificate, error) {
	if c == nil {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", c.certFile, c.keyFile, err)
	}
	return &cert, nil
}

// set makes cert the one new connections get.
func (c *tlsCerts) set(cert *tls.Certificate) {
	if c != nil && cert != nil {
		c.cur.Store(cert)
	}
}

// file is the certificate's file, "" for plain HTTP.
func (c *tlsCerts) file() string {
	if c == nil {
		return ""
	}
	return c.certFile
}

// config is the TLS configuration of the HTTP server; nil for plain HTTP.
func (c *tlsCerts) config() *tls.Config {
	if c == nil {
		return nil
	}
	return &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.cur.Load(), nil }}
}
