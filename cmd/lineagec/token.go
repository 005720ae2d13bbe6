package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage/server"
)

type tokenParams struct {
	name string
	role string
}

func newTokenCmd(*globalParams) *cobra.Command {
	var p tokenParams
	cmd := &cobra.Command{
		Use:   "token [--name N] [--role approver|admin]",
		Short: "Make a fresh token for an admin or approver of lineagec serve",
		Long: `Token prints a fresh random bearer token on the first line and, on the second,
the principal's line for the --auth file of ` + "`lineagec serve`" + ` (which keeps only the
token's SHA-256). Give the token to the person; paste the line as it is under
"principals:" in a YAML auth file: it is a list item, indented by two spaces:

  principals:
    - {"name": "alice", "role": "approver", "token_sha256": "…"}
` + exitCodesHelp,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runToken(p, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&p.name, "name", "alice", "the principal's name (the approver in the log)")
	cmd.Flags().StringVar(&p.role, "role", "approver", "approver or admin")
	return cmd
}

func runToken(p tokenParams, stdout io.Writer) error {
	if p.role != string(server.RoleApprover) && p.role != string(server.RoleAdmin) {
		return fmt.Errorf("unknown --role %q (want approver, admin)", p.role)
	}
	line := fmt.Sprintf(`{"principals": [{"name": %q, "role": %q, "token_sha256": "%%s"}]}`, p.name, p.role)
	// The line is validated like an auth file, so a bad name fails here, not at serve.
	tok := server.NewToken()
	// A YAML list item, indented: pasted under "principals:" it is one more
	// principal. D305 (the token's line pastes as a list item).
	entry := fmt.Sprintf(`  - {"name": %q, "role": %q, "token_sha256": %q}`, p.name, p.role, server.TokenSHA256(tok))
	if _, err := server.ParseAuth("", []byte(fmt.Sprintf(line, server.TokenSHA256(tok)))); err != nil {
		return fmt.Errorf("--name %q: %w", p.name, err)
	}
	_, err := fmt.Fprintf(stdout, "%s\n%s\n", tok, entry)
	return err
}
