package kvevents

import "github.com/kvtop/kvtop/collectors/internal/msgpack"

// reader keeps skipints_test.go's words (written for kvevents' own reader
// before the shared cursor): a payload and an offset, stepped over with
// the cursor the decoder uses.
type reader struct {
	b []byte
	i int
}

func (r *reader) do(step func(*msgpack.Cursor) error) error {
	c := msgpack.At(r.b, r.i)
	err := step(&c)
	r.i = c.Pos()
	return err
}

func (r *reader) skip() error { return r.do((*msgpack.Cursor).Skip) }

func (r *reader) skipInts(n int) error {
	return r.do(func(c *msgpack.Cursor) error { return c.SkipInts(n) })
}

var errTruncated = msgpack.ErrTruncated
