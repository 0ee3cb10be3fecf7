package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/spf13/viper"
)

// FuzzRead feeds arbitrary files to Read: it never panics, a config it
// accepts validates, and every problem it reports has a reason and a line
// inside the file.
func FuzzRead(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join(corpus, "*", "*.yaml"))
	for _, s := range seeds {
		if data, err := os.ReadFile(s); err == nil {
			f.Add(data)
		}
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "kvtop.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, _, err := Read(viper.New(), path, nil)
		if err == nil {
			if errs := c.Validate(); len(errs) > 0 {
				t.Fatalf("accepted a config that does not validate: %v", errs)
			}
			return
		}
		var es Errors
		if !errors.As(err, &es) {
			return // one problem: the file is not YAML, or cannot be read
		}
		lines := yamlLines(data)
		for _, e := range es {
			if e.Reason == "" || e.Line < 0 || (e.File == path && e.Line > lines) {
				t.Fatalf("problem %#v (file of %d lines)", e, lines)
			}
		}
	})
}

// BenchmarkRead is one load of the complete config: file, schema checks,
// env and validation (once per kvtop start; here to keep it small).
func BenchmarkRead(b *testing.B) {
	path := filepath.Join(corpus, "valid", "full.yaml")
	for b.Loop() {
		if _, _, err := Read(viper.New(), path, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// yamlLines counts the lines YAML sees in data: it breaks lines at \n,
// \r\n, a lone \r, and (as yaml.v3's is_break) at NEL U+0085, U+2028 and
// U+2029, in UTF-8 as in a UTF-16 file (a byte order mark first): a fuzzed
// "\xfe\xff (00" and "\u008500" are two lines to it.
func yamlLines(data []byte) int {
	text := string(data)
	if len(data) >= 2 && (data[0] == 0xfe && data[1] == 0xff || data[0] == 0xff && data[1] == 0xfe) {
		u := make([]uint16, 0, len(data)/2)
		for i := 2; i+1 < len(data); i += 2 {
			if data[0] == 0xfe {
				u = append(u, uint16(data[i])<<8|uint16(data[i+1]))
			} else {
				u = append(u, uint16(data[i+1])<<8|uint16(data[i]))
			}
		}
		text = string(utf16.Decode(u))
	}
	text = strings.ReplaceAll(text, "\r\n", "\n")
	return strings.Count(text, "\n") + strings.Count(text, "\r") + strings.Count(text, "\u0085") + strings.Count(text, "\u2028") + strings.Count(text, "\u2029") + 1
}
