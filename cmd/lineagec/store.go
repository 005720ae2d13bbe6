package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage/runtime/store/postgres"
)

type storeInitParams struct {
	*globalParams
	store string
}

func newStoreCmd(g *globalParams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Manage a shared store (PostgreSQL)",
		Long: `Store manages a store shared by several nodes (docs/stores.md). The embedded file
store (--data) needs no setup.` + "\n" + exitCodesHelp,
		Args: argsUsage(cobra.NoArgs),
	}
	cmd.AddCommand(newStoreInitCmd(g))
	return cmd
}

func newStoreInitCmd(g *globalParams) *cobra.Command {
	p := storeInitParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "init --store URL",
		Short: "Create the schema of a PostgreSQL store",
		Long: `Init creates the tables and the append-only triggers of the PostgreSQL store
at URL (postgres://user@host/db?...). It may run again: it changes nothing
that exists. The role needs the right to create tables in the database; the
nodes that write to the store afterwards need only SELECT and INSERT (see
docs/stores.md). The schema is also created on first use by a role that may.
` + exitCodesHelp + `
store init exits 0 when the schema is ready, 1 on errors.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStoreInit(cmd.Context(), p, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&p.store, "store", "", "the store's URL, postgres://… (default $LINEAGE_STORE)")
	return cmd
}

func runStoreInit(ctx context.Context, p storeInitParams, stdout io.Writer) error {
	url := p.store
	if url == "" {
		url = os.Getenv("LINEAGE_STORE")
	}
	if url == "" {
		return errors.New("store init: no store: pass --store postgres://… or set $LINEAGE_STORE")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := postgres.Init(ctx, url); err != nil {
		var pg *pgconn.PgError
		if errors.As(err, &pg) && pg.Code == "42501" { // insufficient_privilege
			// The store's own words are about writing; init is about creating.
			return fmt.Errorf("store init: the role may not create the schema: run it as the database's owner (docs/stores.md, \"Roles and grants\"): %w", err)
		}
		return err
	}
	_, err := fmt.Fprintln(stdout, "ok: schema ready (tables lineage_agents, lineage_records, append-only)")
	return err
}

// storeCommands are the commands that take the global --store: every one that
// opens an agent's log (openSession). The others refuse it (D180: '--store' for the agent commands).
var storeCommands = map[string]bool{
	"lineagec agent create": true, "lineagec agent list": true, "lineagec request": true,
	"lineagec pending": true, "lineagec approve": true, "lineagec reject": true,
	"lineagec terminate": true, "lineagec state": true, "lineagec log": true, "lineagec verify": true,
	"lineagec checkpoint": true, "lineagec replay": true,
}

// addStoreFlag adds the global --store, which puts the agent commands on
// the PostgreSQL store instead of the data directory. serve and store init
// have a --store of their own (serve keeps its keys in --data as well), which
// shadows this one. The check runs after --server's (remote.go).
func addStoreFlag(root *cobra.Command, g *globalParams) {
	root.PersistentFlags().StringVar(&g.store, "store", "",
		"the PostgreSQL store, postgres://…, instead of the data directory (default $LINEAGE_STORE unless --data is given)")
	global := root.PersistentFlags().Lookup("store")
	before := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if before != nil {
			if err := before(cmd, args); err != nil {
				return err
			}
		}
		if cmd.Flags().Lookup("store") != global || !global.Changed {
			return nil
		}
		switch {
		case g.store == "":
			return errors.New(`--store "" names no store: give a postgres://… URL, or leave --store out for the data directory`)
		case !storeCommands[cmd.CommandPath()]:
			return fmt.Errorf("%s does not use a store (--store)", cmd.CommandPath())
		case cmd.Flags().Changed("data"):
			return errors.New("--data and --store exclude each other: --data is the file store, --store the PostgreSQL store")
		case g.serverURL() != "":
			return errors.New("--store and --server exclude each other: with --server the server reads its own store")
		}
		return nil
	}
}

// storeURL is the PostgreSQL store of the agent commands, or "" for the data
// directory: --store, else $LINEAGE_STORE unless --data names a directory.
func (g *globalParams) storeURL() string {
	switch {
	case g.store != "":
		return g.store
	case g.data != "":
		return ""
	}
	return os.Getenv("LINEAGE_STORE")
}
