package metrics

import (
	"hash/maphash"
	"testing"
)

// TestLabelScan: the prefilter's label reading agrees with the text
// format on quotes and escapes, and a series hashes the same whatever the
// order of its labels (the duplicate check depends on both).
func TestLabelScan(t *testing.T) {
	seed := maphash.MakeSeed()
	sum := func(labels string) uint64 {
		s, _, ok := scanLabels([]byte(labels), seed, "")
		if !ok {
			t.Fatalf("%s not read", labels)
		}
		return s
	}
	same := [][2]string{
		{`{engine="0",model_name="m"}`, `{model_name="m", engine="0"}`},
		{`{a="1",}`, `{a="1"}`},
		{`{}`, ``},
		{`{a="x\"}",b="y\\"}`, `{b="y\\",a="x\"}"}`},
	}
	for _, p := range same {
		if sum(p[0]) != sum(p[1]) {
			t.Errorf("%s and %s hash apart", p[0], p[1])
		}
	}
	differ := [][2]string{
		{`{engine="0"}`, `{engine="1"}`},
		{`{a="1",b="2"}`, `{a="2",b="1"}`},
		{`{a="1"}`, `{a="1",b="1"}`},
	}
	for _, p := range differ {
		if sum(p[0]) == sum(p[1]) {
			t.Errorf("%s and %s hash the same", p[0], p[1])
		}
	}
	for _, bad := range []string{`{a="1"`, `{a=1}`, `{a}`, `{a="x\"}`} {
		if _, _, ok := scanLabels([]byte(bad), seed, ""); ok {
			t.Errorf("%s read as a label set", bad)
		}
	}

	values := []struct{ labels, name, want string }{
		{`{engine="0",model_name="m"}`, "engine", "0"},
		{`{model_name="a \"b\" \\ c\nd",engine="7"}`, "model_name", "a \"b\" \\ c\nd"},
		{`{model_name="x}",engine="7"}`, "engine", "7"},
		{`{"engine"="3"}`, "engine", "3"},
	}
	for _, v := range values {
		if got, ok := labelValue([]byte(v.labels), v.name); !ok || got != v.want {
			t.Errorf("%s %s = %q, want %q", v.labels, v.name, got, v.want)
		}
	}
	if _, id, _ := scanLabels([]byte(`{model_name="m",engine="12"}`), seed, "engine"); string(id) != "12" {
		t.Errorf("engine id %q", id)
	}
	if _, ok := labelValue([]byte(`{engine="0"}`), "dp_rank"); ok {
		t.Error("dp_rank found where there is none")
	}
}
