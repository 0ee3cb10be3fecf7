package metrics

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"strconv"
	"time"
)

// Bounds on the work one page may cost. A page whose series carry
// thousands of distinct engine labels fits easily under the body limit;
// without these bounds it keeps a core busy for as long as it takes.
const (
	DefaultMaxEngines = 256 // engines (engine / dp_rank label values) per worker page
	// DefaultMaxSeries: sample lines of the families kvtop reads, per page.
	// A 256-engine vLLM page has about 25 000; a page at 200 000 took 1.1–
	// 2.3 s to parse on a busy 2-core machine, close to the default 2 s
	// scrape timeout, so the bound leaves headroom over real pages only.
	DefaultMaxSeries = 50_000
)

// checkEvery is how many lines (or folded series) pass between two looks
// at the deadline: often enough to stop within milliseconds, rare enough
// to cost nothing.
const checkEvery = 4096

// budget bounds one Parse: series and engines a page may fold, and the
// scrape's one deadline (fetch, prefilter, text parse and fold together).
type budget struct {
	maxSeries, maxEngines int
	ctx                   context.Context // nil: no deadline
	timeout               time.Duration   // as configured, for messages
}

func defaultBudget() budget {
	return budget{maxSeries: DefaultMaxSeries, maxEngines: DefaultMaxEngines}
}

// over reports that the deadline passed (or the collector is stopping).
func (b *budget) over() bool { return b.ctx != nil && b.ctx.Err() != nil }

// late is the error of a parse stopped by the deadline after n series.
func (b *budget) late(n int) error {
	return &limitError{kind: "timeout", msg: fmt.Sprintf("parse not done within %s after %s series", b.timeout, count(n))}
}

// limitError is a page that kvtop stopped reading: kind is the
// SourceError kind (too_large or timeout), msg says how far it got.
type limitError struct{ kind, msg string }

func (e *limitError) Error() string { return e.msg }

func tooMany(n, limit int, what, key string) error {
	return &limitError{kind: "too_large", msg: fmt.Sprintf("%s %s, over the limit of %s (limits.%s)", count(n), what, count(limit), key)}
}

// idsCounted bounds the counting of an over-large page's engines, as a
// multiple of the engines bound: past it the message says "at least".
const idsCounted = 16

// idCount counts the distinct values of one engine label (engine for
// vLLM, dp_rank for SGLang) among the kept lines of its dialect. A line
// without the label is engine "", as the fold sees it.
type idCount struct {
	seen map[uint64]struct{}
	last []byte // the previous line's value: pages list an engine's series together
	any  bool
}

func (c *idCount) reset() {
	if c.seen == nil {
		c.seen = map[uint64]struct{}{}
	}
	c.last, c.any = nil, false
}

// release empties the count after a page (dropping a large map).
func (c *idCount) release() {
	if len(c.seen) > checkEvery {
		c.seen = nil
	}
	clear(c.seen)
	c.last, c.any = nil, false
}

// over: more engines than b allows.
func (c *idCount) over(b *budget) bool { return len(c.seen) > b.maxEngines }

// full: counted as far as the message needs.
func (c *idCount) full(b *budget) bool { return len(c.seen) >= idsCounted*b.maxEngines }

func (c *idCount) tooMany(label string, b *budget) error {
	err := tooMany(len(c.seen), b.maxEngines, "engines ("+label+" label)", "engines").(*limitError)
	if c.full(b) {
		err.msg = "at least " + err.msg
	}
	return err
}

func (c *idCount) add(seed maphash.Seed, v []byte) {
	if c.any && bytes.Equal(v, c.last) {
		return
	}
	c.last, c.any = v, true
	c.seen[maphash.Bytes(seed, v)] = struct{}{}
}

// count writes n with its thousands apart: "350 000".
func count(n int) string {
	s := strconv.Itoa(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var b []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ' ')
		}
		b = append(b, s[i])
	}
	if neg {
		return "-" + string(b)
	}
	return string(b)
}
