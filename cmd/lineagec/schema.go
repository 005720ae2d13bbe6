package main

import (
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage/schema"
)

type schemaParams struct{}

func newSchemaCmd(g *globalParams) *cobra.Command {
	var p schemaParams
	names := schema.Names()
	return &cobra.Command{
		Use:   "schema " + strings.Join(names, "|"),
		Short: "Print a published JSON Schema",
		Long: `Schema prints one of lineage's published JSON Schemas (draft 2020-12), as
embedded in this binary: "policy" for policy documents, "conformance" for
conformance case files. Point an editor's YAML/JSON language server at it.
` + exitCodesHelp,
		Args:      argsUsage(cobra.ExactArgs(1)),
		ValidArgs: names,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSchema(p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
}

func runSchema(_ schemaParams, args []string, stdout, _ io.Writer) error {
	b, err := schema.Get(args[0])
	if err != nil {
		return err
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n')
	}
	_, err = stdout.Write(b)
	return err
}
