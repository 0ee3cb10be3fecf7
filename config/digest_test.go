package config

import (
	"strings"
	"testing"
	"time"
)

// TestDigestNamesTheConfigNotItsSecrets: the digest changes with what
// kvtop watches and how, not with where the file was or a URL's password.
func TestDigestNamesTheConfigNotItsSecrets(t *testing.T) {
	c := Defaults()
	c.Workers = []Worker{{Name: "w0", Metrics: "http://10.0.0.5:8000/metrics"}}
	d := Digest(c)
	if len(d) != 32 || strings.Trim(d, "0123456789abcdef") != "" {
		t.Fatalf("digest %q: want 32 hex digits", d)
	}
	same := c
	same.File = "/elsewhere/kvtop.yaml"
	same.Workers = []Worker{{Name: "w0", Metrics: "http://op:s3cret@10.0.0.5:8000/metrics"}}
	if Digest(same) != d {
		t.Error("the file's place or a URL password changed the digest")
	}
	if c.Workers[0].Metrics != "http://10.0.0.5:8000/metrics" {
		t.Error("Digest changed its argument")
	}
	other := c
	other.Window = 30 * time.Second
	if Digest(other) == d {
		t.Error("a different window, the same digest")
	}
}
