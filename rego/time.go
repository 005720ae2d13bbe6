package rego

import (
	"errors"
	"fmt"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// Time in UTC only (docs/extensions.md, D240 (time builtins in UTC only)). OPA's time
// builtins take a time as nanoseconds or as [ns, zone] (time.format also
// [ns, zone, layout]). A zone other than "UTC" — "Local", any IANA name, even ""
// — is resolved through the host's clock settings and time zone database, so
// two nodes, or a replay on another machine, could decide one request two
// ways. time.parse_ns with a layout that holds a zone abbreviation ("MST",
// and the named layouts that hold it) reads the abbreviation's offset from
// the host's local zone. Those uses are refused: a compile error where the
// zone or layout is written in the module (HostTimeUse, from the compiler),
// a builtin error at run time, so extension_error, where it is computed.

// zoneOperands are, for each time builtin that takes [ns, zone], the
// operands (0-based) that may carry a zone.
var zoneOperands = map[string][]int{
	"time.add_date": {0}, "time.clock": {0}, "time.date": {0}, "time.diff": {0, 1},
	"time.format": {0}, "time.weekday": {0},
}

// layoutOperands are, for each time builtin that parses with a layout, the
// operand that is the layout.
var layoutOperands = map[string]int{"time.parse_ns": 0}

// namedLayouts are the layout names OPA's time.parse_ns accepts in place of
// a Go layout (topdown's acceptedTimeFormats), as Go spells them.
var namedLayouts = map[string]string{
	"ANSIC": "Mon Jan _2 15:04:05 2006", "UnixDate": "Mon Jan _2 15:04:05 MST 2006",
	"RubyDate": "Mon Jan 02 15:04:05 -0700 2006", "RFC822": "02 Jan 06 15:04 MST",
	"RFC822Z": "02 Jan 06 15:04 -0700", "RFC850": "Monday, 02-Jan-06 15:04:05 MST",
	"RFC1123": "Mon, 02 Jan 2006 15:04:05 MST", "RFC1123Z": "Mon, 02 Jan 2006 15:04:05 -0700",
	"RFC3339": "2006-01-02T15:04:05Z07:00", "RFC3339Nano": "2006-01-02T15:04:05.999999999Z07:00",
}

// TimeBuiltins are the time builtins whose operands HostTimeUse checks.
func TimeBuiltins() []string {
	return []string{"time.add_date", "time.clock", "time.date", "time.diff", "time.format", "time.parse_ns", "time.weekday"}
}

// HostTimeUse reports why operand i (0-based) of the builtin name, as far as
// v shows it, makes the result depend on the host: a zone other than "UTC"
// or a parse layout with a zone abbreviation. "" when it does not, or when v
// does not show it (a zone not yet computed: the run-time check sees it).
func HostTimeUse(name string, i int, v ast.Value) string {
	for _, j := range zoneOperands[name] {
		if i != j {
			continue
		}
		arr, ok := v.(*ast.Array)
		if !ok || arr.Len() < 2 {
			return ""
		}
		zone, ok := arr.Elem(1).Value.(ast.String)
		if !ok || zone == "UTC" {
			return ""
		}
		return fmt.Sprintf("%s: time zone %s depends on the host's clock settings and time zone database; extensions use \"UTC\" only", name, ast.String(zone).String())
	}
	if j, ok := layoutOperands[name]; ok && i == j {
		s, ok := v.(ast.String)
		if !ok {
			return ""
		}
		layout := string(s)
		if l, ok := namedLayouts[layout]; ok {
			layout = l
		}
		if strings.Contains(layout, "MST") {
			return fmt.Sprintf("%s: layout %s names a zone abbreviation (MST), whose offset is read from the host's time zone; extensions use numeric offsets (-0700, Z07:00) only", name, s.String())
		}
	}
	return ""
}

// init puts a check in front of OPA's time builtins. OPA looks its own
// builtins up before a query's functions, so a function given to one
// prepared query cannot stand in for time.clock; the replacement is
// process-wide, made by the package through which every lineage evaluation
// is checked. The checked builtins then run OPA's own implementation.
func init() {
	for _, name := range TimeBuiltins() {
		orig := topdown.GetBuiltin(name)
		if orig == nil {
			panic("lineage/rego: OPA has no builtin " + name)
		}
		name := name
		topdown.RegisterBuiltinFunc(name, func(bctx topdown.BuiltinContext, ops []*ast.Term, iter func(*ast.Term) error) error {
			for i, op := range ops {
				if why := HostTimeUse(name, i, op.Value); why != "" {
					return errors.New(strings.TrimPrefix(why, name+": ")) // OPA puts the name in front
				}
			}
			return orig(bctx, ops, iter)
		})
	}
}
