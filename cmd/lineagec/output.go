package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
)

// Output formats.
const (
	formatText  = "text"
	formatJSON  = "json"
	formatTable = "table"
)

// addFormatFlag adds --format with the allowed values, the first the default.
func addFormatFlag(cmd *cobra.Command, p *string, allowed ...string) {
	cmd.Flags().StringVar(p, "format", allowed[0], "output format: "+strings.Join(allowed, ", "))
}

// checkFormat refuses a --format value the command does not know.
func checkFormat(format string, allowed ...string) error {
	if slices.Contains(allowed, format) {
		return nil
	}
	return fmt.Errorf("unknown --format %q (want %s)", format, strings.Join(allowed, ", "))
}

// writeJSONLine writes v as one line of JSON.
func writeJSONLine(w io.Writer, v any) error {
	return encodeJSON(w, v, "")
}

// writeJSONIndent writes v as indented JSON.
func writeJSONIndent(w io.Writer, v any) error {
	return encodeJSON(w, v, "  ")
}

// encodeJSON writes v and a newline, leaving <, > and & as they are (a
// reason such as "amount > limit" stays readable).
func encodeJSON(w io.Writer, v any, indent string) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	return enc.Encode(v)
}

// verdictExit maps a verdict to the command's exit status (0 allow, 2 deny, 3 pending).
func verdictExit(v lineage.Verdict) error {
	switch v.Decision {
	case lineage.Allow:
		return nil
	case lineage.Pending:
		return &exitError{code: exitPending}
	default:
		return &exitError{code: exitDeny}
	}
}

// argsUsage adds the usage line to a positional-argument error.
func argsUsage(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return fmt.Errorf("%w\nusage: %s", err, cmd.UseLine())
		}
		return nil
	}
}
