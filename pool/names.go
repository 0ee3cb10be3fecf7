package pool

import (
	"net"
	"net/url"
	"strconv"
	"strings"
)

// names maps the ids sources use for a worker (router labels such as
// http://10.0.0.5:8000, topic ids such as 10.0.0.5:8000, configured names)
// to worker indexes: by host:port first, then verbatim.
type names struct {
	byHost  map[string]int
	byName  map[string]int
	resolve map[string]int // cache of every id seen, resolved or discovered
}

func newNames() *names {
	return &names{byHost: map[string]int{}, byName: map[string]int{}, resolve: map[string]int{}}
}

// add registers worker idx under its name and aliases. First come wins:
// an alias claimed by an earlier worker stays with it.
func (n *names) add(idx int, name string, aliases []string) {
	for _, id := range append([]string{name}, aliases...) {
		if id == "" {
			continue
		}
		if _, ok := n.byName[id]; !ok {
			n.byName[id] = idx
		}
		if hp := hostPort(id); hp != "" {
			if _, ok := n.byHost[hp]; !ok {
				n.byHost[hp] = idx
			}
		}
	}
}

// lookup resolves id to a worker index, or -1.
func (n *names) lookup(id string) int {
	if i, ok := n.resolve[id]; ok {
		return i
	}
	i := -1
	if hp := hostPort(id); hp != "" {
		if j, ok := n.byHost[hp]; ok {
			i = j
		}
	}
	if i < 0 {
		if j, ok := n.byName[id]; ok {
			i = j
		}
	}
	if i < 0 {
		// Dynamo names data-parallel rank r > 0 "worker_<id>/dp<r>": the
		// same worker, not another one.
		if base := foldRank(id); base != id {
			i = n.lookup(base)
		}
	}
	if i >= 0 && len(n.resolve) < maxResolveCache {
		n.resolve[id] = i
	}
	return i
}

// maxResolveCache bounds the lookup cache against sources inventing ids.
const maxResolveCache = 1 << 14

// hostPort extracts "host:port" (lower case) from a URL or host:port
// string, or "" when id names no endpoint (a plain worker name).
func hostPort(id string) string {
	s := strings.TrimSpace(id)
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return ""
		}
		return strings.ToLower(u.Host)
	}
	if strings.ContainsAny(s, "/ ") {
		return ""
	}
	h, p, err := net.SplitHostPort(s)
	if err != nil || h == "" || p == "" {
		return ""
	}
	return strings.ToLower(net.JoinHostPort(h, p))
}

// SameEndpoint reports whether two ids (URLs or host:port) name the same
// host and port, by the rule the pool uses to map router labels and topic
// ids to workers.
func SameEndpoint(a, b string) bool {
	ha := hostPort(a)
	return ha != "" && ha == hostPort(b)
}

// foldRank strips a data-parallel rank suffix "/dp<r>" (r > 0) from a
// worker name, as Dynamo writes it for ranks after the first; other names
// are returned whole.
func foldRank(name string) string {
	i := strings.LastIndex(name, "/dp")
	if i <= 0 {
		return name
	}
	r := name[i+3:]
	if r == "" || r[0] == '0' || strings.TrimLeft(r, "0123456789") != "" {
		return name
	}
	if v, err := strconv.Atoi(r); err != nil || v <= 0 {
		return name
	}
	return name[:i]
}
