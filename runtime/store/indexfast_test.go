package store

import (
	"reflect"
	"strings"
	"testing"
)

// Records as the runtime writes them (canonical JSON, one of each kind and a
// pending action), and the members IndexChangeOf reads written otherwise.
var (
	genesisRecord     = `{"at":"2026-01-01T00:00:00.000000000Z","body":{"agent":"agt_dump_1"},"hash":"sha256:1a3d172f9826aeb47bfe0bcf4f73bc5737546fb12296bdf5798d45d8d61f93a9","kind":"genesis","prev":"","seq":0}`
	policyRecord      = `{"at":"2026-01-01T00:00:00.000000000Z","body":{"digest":"sha256:53b721cbda5ce76cb4fe41e5844393c293d524c6b196fe36bdf83106bd9231dc","policy":{"budget":100,"default_rule":null,"max_pending":10,"rate_limit":null,"rego":[],"scar_limit":10,"scar_weights":{"minor":1,"moderate":3,"severe":10},"tools":{"pay":{"cost":1,"requires_approval":true,"when":[]},"read":{"cost":0,"requires_approval":false,"when":[]}}}},"hash":"sha256:367834235ead5ef4908b8b917853698429ad7c93b5c0e9589292b915d3a993eb","kind":"policy","prev":"sha256:1a3d172f9826aeb47bfe0bcf4f73bc5737546fb12296bdf5798d45d8d61f93a9","seq":1}`
	actionRecord      = `{"at":"2026-01-01T00:00:01.000000000Z","body":{"request":{"args":{"invoice":12},"id":"req_2","tool":"read"},"verdict":{"cost":0,"decision":"allow","reason":"ok","request_id":"req_2","scar":null,"seq":2,"terminated":null}},"hash":"sha256:a11a7ec8f64cea6d03b582e1de8746466643db3232b9593bdd82e2868a664b99","kind":"action","prev":"sha256:367834235ead5ef4908b8b917853698429ad7c93b5c0e9589292b915d3a993eb","seq":2}`
	pendingRecord     = `{"at":"2026-01-01T00:00:02.000000000Z","body":{"request":{"args":{"invoice":12},"id":"p1","tool":"pay"},"verdict":{"cost":0,"decision":"pending","reason":"approval_required","request_id":"p1","scar":null,"seq":3,"terminated":null}},"hash":"sha256:5a47d369c14cddbfe3e25cc46f0cfd7927c9dae36b546499fa361da765b15df3","kind":"action","prev":"sha256:a11a7ec8f64cea6d03b582e1de8746466643db3232b9593bdd82e2868a664b99","seq":3}`
	approvalRecord    = `{"at":"2026-01-01T00:00:03.000000000Z","body":{"approved":true,"approver":"me","request_id":"p1","verdict":{"cost":1,"decision":"allow","reason":"ok","request_id":"p1","scar":null,"seq":4,"terminated":null}},"hash":"sha256:542ca1576028227e97abd9ed646d95ed795e0eea81055f51620891eb40a19604","kind":"approval","prev":"sha256:5a47d369c14cddbfe3e25cc46f0cfd7927c9dae36b546499fa361da765b15df3","seq":4}`
	terminationRecord = `{"at":"2026-01-01T00:00:04.000000000Z","body":{"by":"ops","reason":"killed"},"hash":"sha256:542ca1576028227e97abd9ed646d95ed795e0eea81055f51620891eb40a19604","kind":"termination","prev":"sha256:5a47d369c14cddbfe3e25cc46f0cfd7927c9dae36b546499fa361da765b15df3","seq":5}`
)

// indexChangeCases are records and variants of them: valid and not, read
// alike by encoding/json and not.
func indexChangeCases() []string {
	cases := []string{genesisRecord, policyRecord, actionRecord, pendingRecord, approvalRecord, terminationRecord}
	edits := [][2]string{
		// member names encoding/json also reads as ours, or not
		{`"kind":`, `"Kind":`}, {`"kind":`, `"KIND":`}, {`"kind":`, `"\u006bind":`}, {`"kind":`, "\"\u212aind\":"},
		{`"at":`, `"AT":`}, {`"body":`, `"Body":`}, {`"request":`, `"Request":`}, {`"verdict":`, `"verdicT":`},
		{`"id":`, `"ID":`}, {`"tool":`, `"tooL":`}, {`"args":`, `"ARGS":`}, {`"decision":`, `"Decision":`},
		{`"request_id":"p1","verdict"`, `"REQUEST_ID":"p1","verdict"`}, {`"hash":`, `"HASH":`}, {`"hash":`, `"kind":"action","hash":`},
		{`"hash":`, `"kind":"genesis","hash":`}, {`"hash":`, `"Kind":"action","hash":`}, {`"hash":`, `"body":{},"hash":`},
		{`"hash":`, `"x":1,"x":2,"hash":`}, {`"cost":0,`, `"decision":"pending","cost":0,`},
		{`"args":{"invoice":12},`, `"args":{"invoice":12},"id":"x",`}, {`"args":{"invoice":12},`, ``},
		// values of another type, null, absent
		{`"at":"2026-01-01T00:00:01.000000000Z",`, ``}, {`"at":"2026-01-01T00:00:02.000000000Z"`, `"at":null`},
		{`"at":"2026-01-01T00:00:02.000000000Z"`, `"at":7`}, {`"kind":"action"`, `"kind":null`}, {`"kind":"action"`, `"kind":["action"]`},
		{`"body":{"request"`, `"body":null,"x":{"request"`}, {`"body":{"request"`, `"body":[],"x":{"request"`},
		{`"request":{"args"`, `"request":null,"x":{"args"`}, {`"request":{"args"`, `"request":"x","x":{"args"`},
		{`"verdict":{"cost"`, `"verdict":null,"x":{"cost"`}, {`"verdict":{"cost"`, `"verdict":[1],"x":{"cost"`},
		{`"id":"p1"`, `"id":1`}, {`"id":"p1"`, `"id":null`}, {`"tool":"pay"`, `"tool":false`}, {`"decision":"pending"`, `"decision":0`},
		{`"decision":"pending"`, `"decision":null`}, {`"request_id":"p1","verdict"`, `"request_id":1,"verdict"`},
		{`"body":{"by":"ops","reason":"killed"}`, `"body":7`}, {`"body":{"by":"ops","reason":"killed"},`, ``},
		{`"args":{"invoice":12}`, `"args":null`}, {`"args":{"invoice":12}`, `"args":[1, 2]`}, {`"args":{"invoice":12}`, `"args":"x"`},
		// escapes, whitespace, UTF-8
		{`"id":"p1"`, `"id":"p\u0031\n\ud83d\ude00"`}, {`"id":"p1"`, `"id":"\ud800"`}, {`"id":"p1"`, "\"id\":\"p\xff\""},
		{`"args":{"invoice":12}`, "\"args\":{\"k\":\"\xff\"}"}, {`"args":{"invoice":12}`, `"args" : { "invoice" : 12 } `},
		{`"kind":"action"`, `"kind":"act\u0069on"`}, {`"decision":"pending"`, `"decision":"pend\u0069ng"`},
		{`"request_id":"p1","verdict"`, `"request_id":"\"p1\"","verdict"`}, {`{"at"`, ` { "at"`}, {`"seq":3}`, `"seq":3} `},
		// not JSON, or more than one value
		{`"seq":3}`, `"seq":3`}, {`"seq":3}`, `"seq":3}{}`}, {`"seq":3}`, `"seq":3}x`}, {`"seq":`, `"seq":01`},
		{`"args":{"invoice":12}`, `"args":{"invoice":12,}`}, {`"args":{"invoice":12}`, `"args":{"invoice":1.2e}`},
	}
	var out []string
	out = append(out, cases...)
	for _, c := range cases {
		for _, e := range edits {
			if strings.Contains(c, e[0]) {
				out = append(out, strings.Replace(c, e[0], e[1], 1))
			}
		}
	}
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, n := range []int{9998, 9999, 10000, 10001} {
		out = append(out, strings.Replace(pendingRecord, `{"invoice":12}`, deep(n), 1), strings.Replace(terminationRecord, `{"by":"ops","reason":"killed"}`, deep(n), 1))
	}
	return append(out, ``, `null`, `[]`, `"action"`, `{}`, `{"kind":"termination"}`, `{"kind":"action","body":{}}`)
}

// TestIndexChangeFast: the fast reading agrees with encoding/json wherever it
// answers, and it answers for the records a decision appends.
func TestIndexChangeFast(t *testing.T) {
	answered := map[string]bool{}
	for _, rec := range indexChangeCases() {
		checkIndexChangeFast(t, rec)
		_, answered[rec] = indexChangeFast("agt", 3, []byte(rec))
	}
	for _, rec := range []string{actionRecord, pendingRecord, approvalRecord, terminationRecord} {
		if !answered[rec] {
			t.Errorf("the fast reading does not answer for %s", rec)
		}
	}
	for _, rec := range []string{
		strings.Replace(pendingRecord, `"id":"p1"`, `"id":"p\u0031\n\ud83d\ude00"`, 1),
		strings.Replace(pendingRecord, `"args":{"invoice":12}`, `"args":null`, 1),
		strings.Replace(pendingRecord, `"args":{"invoice":12},`, ``, 1),
		strings.Replace(pendingRecord, `"hash":`, `"x":1,"x":2,"hash":`, 1),
	} {
		if !answered[rec] {
			t.Errorf("the fast reading does not answer for %s", rec)
		}
	}
	for _, rec := range []string{genesisRecord, policyRecord, strings.Replace(pendingRecord, `"kind":`, `"Kind":`, 1)} {
		if answered[rec] {
			t.Errorf("the fast reading answers for %s", rec)
		}
	}
}

func checkIndexChangeFast(t *testing.T, rec string) {
	t.Helper()
	fast, ok := indexChangeFast("agt", 3, []byte(rec))
	if !ok {
		return
	}
	want, err := indexChangeDecoded("agt", 3, []byte(rec))
	if err != nil {
		t.Errorf("fast reading answers %+v, encoding/json fails (%v), for %q", fast, err, rec)
		return
	}
	if !reflect.DeepEqual(fast, want) {
		t.Errorf("fast reading answers %+v (pending %+v), encoding/json %+v (pending %+v), for %q", fast, fast.AddPending, want, want.AddPending, rec)
	}
}

func FuzzIndexChangeFast(f *testing.F) {
	for _, rec := range indexChangeCases() {
		f.Add(rec)
	}
	f.Fuzz(func(t *testing.T, rec string) { checkIndexChangeFast(t, rec) })
}

// BenchmarkIndexChangeOf reads the records a decision appends, as the
// memory and file stores' indexes do on every append.
func BenchmarkIndexChangeOf(b *testing.B) {
	for _, c := range []struct{ name, rec string }{{"action", actionRecord}, {"pending", pendingRecord}, {"approval", approvalRecord}} {
		b.Run(c.name, func(b *testing.B) {
			rec := []byte(c.rec)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := IndexChangeOf("agt", 3, rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
