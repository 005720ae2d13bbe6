package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

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
		return err
	}
	_, err := fmt.Fprintln(stdout, "ok: schema ready (tables lineage_agents, lineage_records, append-only)")
	return err
}
