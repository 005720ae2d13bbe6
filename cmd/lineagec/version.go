package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

type versionParams struct {
	format string
}

// versionInfo is what `lineagec version` reports, read from the binary's
// build information (runtime/debug.ReadBuildInfo).
type versionInfo struct {
	Module  string `json:"module"`
	Version string `json:"version"`
	// Revision, Time and Modified are the VCS stamp `go build` writes when it
	// builds inside a checkout; `go run`, `go test` and -buildvcs=false leave
	// them out.
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified *bool  `json:"modified,omitempty"`
	Go       string `json:"go"`
	// Deps are the versions of the engines that decide: a verdict can depend
	// on them, so a bug report needs them.
	OPA   string `json:"opa,omitempty"`
	CELGo string `json:"cel_go,omitempty"`
}

func newVersionCmd(*globalParams) *cobra.Command {
	var p versionParams
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print lineagec's version, VCS revision and the OPA and cel-go it was built with",
		Long: `Version prints what the binary knows about its own build: the module and its
version ("(devel)" for a build from a checkout), the VCS revision, its commit
time and whether the working tree had uncommitted changes (only a "go build" or
"go install" inside a git checkout records these), the Go version, and the
versions of OPA and cel-go, which decide every verdict.

--format json prints {module, version, revision, time, modified, go, opa,
cel_go}; revision, time and modified are left out when the build did not
record them.
` + exitCodesHelp,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runVersion(p, cmd.OutOrStdout())
		},
	}
	addFormatFlag(cmd, &p.format, formatText, formatJSON)
	return cmd
}

func runVersion(p versionParams, stdout io.Writer) error {
	if err := checkFormat(p.format, formatText, formatJSON); err != nil {
		return err
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Errorf("version: this binary carries no build information (built without module support)")
	}
	v := readVersion(info)
	if p.format == formatJSON {
		return writeJSONIndent(stdout, v)
	}
	return writeVersionText(stdout, v)
}

// readVersion extracts the report from build information.
func readVersion(info *debug.BuildInfo) versionInfo {
	v := versionInfo{Module: info.Main.Path, Version: info.Main.Version, Go: info.GoVersion}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			m := s.Value == "true"
			v.Modified = &m
		}
	}
	for _, d := range info.Deps {
		version := d.Version
		if d.Replace != nil {
			version = d.Replace.Version
		}
		switch d.Path {
		case "github.com/open-policy-agent/opa":
			v.OPA = version
		case "github.com/google/cel-go":
			v.CELGo = version
		}
	}
	return v
}

func writeVersionText(w io.Writer, v versionInfo) error {
	unknown := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	modified := "unknown"
	if v.Modified != nil {
		modified = fmt.Sprint(*v.Modified)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "lineagec\t%s\n", v.Version)
	fmt.Fprintf(tw, "module\t%s\n", unknown(v.Module))
	fmt.Fprintf(tw, "revision\t%s\n", unknown(v.Revision))
	fmt.Fprintf(tw, "time\t%s\n", unknown(v.Time))
	fmt.Fprintf(tw, "modified\t%s\n", modified)
	fmt.Fprintf(tw, "go\t%s\n", unknown(v.Go))
	fmt.Fprintf(tw, "opa\t%s\n", unknown(v.OPA))
	fmt.Fprintf(tw, "cel-go\t%s\n", unknown(v.CELGo))
	return tw.Flush()
}
