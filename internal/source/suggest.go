package source

// Suggest returns the name of known closest to name within edit distance 2
// (and closer than name's length), or "": the "did you mean" of unknown
// fields, offered to the rest of lineage (unknown flags, unlisted tools) so
// that every "did you mean" measures alike.
func Suggest(name string, known []string) string {
	set := make(map[string]struct{}, len(known))
	for _, k := range known {
		set[k] = struct{}{}
	}
	return suggest(name, set)
}
