package figures

import "testing"

func TestA(t *testing.T) {
	for in, want := range map[string]string{
		"ITL histogram":        "an ITL histogram",
		"TTFT histogram":       "a TTFT histogram",
		"e2e histogram":        "an e2e histogram",
		"queue time histogram": "a queue time histogram",
		"integer":              "an integer",
		"array":                "an array",
		"ext":                  "an ext",
		"invalid code 0xc1":    "an invalid code 0xc1",
		"map":                  "a map",
		"uint64":               "a uint64",
		"unit":                 "a unit",
		"update":               "an update",
		"HTTP error":           "an HTTP error",
		"SGLang worker":        "an SGLang worker",
		"KV event":             "a KV event",
		"Service":              "a Service",
		"InferencePool":        "an InferencePool",
		"one-off":              "a one-off",
		"":                     "a ",
	} {
		if got := A(in); got != want {
			t.Errorf("A(%q) = %q, want %q", in, got, want)
		}
	}
}
