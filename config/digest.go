package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
)

// Digest is a fingerprint of the effective config (sha256, the first 16
// bytes in hex), for a journal's header: two recordings with the same
// digest watched the same pool the same way. No secret enters it: a URL's
// user and password are removed first, and tokens are never in a config
// (only the names of their files and variables are). Where the config
// was read from (File) is not part of it.
func Digest(c Config) string {
	c.File, c.src = "", nil
	c.Workers = append([]Worker(nil), c.Workers...)
	for i := range c.Workers {
		w := &c.Workers[i]
		w.Metrics, w.Events, w.Replay = noUser(w.Metrics), noUser(w.Events), noUser(w.Replay)
	}
	c.Routers = append([]Router(nil), c.Routers...)
	for i := range c.Routers {
		c.Routers[i].Metrics = noUser(c.Routers[i].Metrics)
	}
	c.EventsBind = noUser(c.EventsBind)
	b, err := json.Marshal(c)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// noUser is u without its user information.
func noUser(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		return u
	}
	p.User = nil
	return p.String()
}
