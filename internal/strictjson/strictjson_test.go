package strictjson

import "testing"

func TestLoneSurrogate(t *testing.T) {
	for raw, want := range map[string]int{
		`"\ud800"`: 1, `"a\udc00"`: 2, `"\ud83d\u0041"`: 1, `"\ud83d\\udc00"`: 1, `"\ud83d"`: 1, `{"k":"x","\udfff":1}`: 10,
		`"\ud83d\ude00"`: -1, `"\\ud800"`: -1, `"\\\ud83d\ude00"`: -1, `"plain"`: -1, `"\u00e9\n\""`: -1, `"\uzzzz"`: -1,
	} {
		_, at, ok := LoneSurrogate([]byte(raw))
		if ok != (want >= 0) || (ok && at != want) {
			t.Errorf("LoneSurrogate(%s) = %d, %v; want %d", raw, at, ok, want)
		}
	}
}
