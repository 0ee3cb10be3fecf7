package targets

import (
	"context"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// Merge is one Source of several (the config's workers beside the
// discovered ones): its set is the union of their latest sets, sent
// whenever one changes. A name two sources give is the first source's;
// the other's is left out, said once.
func Merge(srcs ...Source) Source { return merged(srcs) }

type merged []Source

// Name implements Source.
func (m merged) Name() string {
	name := ""
	for i, s := range m {
		if i > 0 {
			name += "+"
		}
		name += s.Name()
	}
	return name
}

type update struct {
	i   int
	set Set
}

// Watch implements Source.
func (m merged) Watch(ctx context.Context, sets chan<- Set, errs chan<- collectors.Observation) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ups := make(chan update)
	fail := make(chan error, len(m))
	for i, s := range m {
		in := make(chan Set)
		go func() { fail <- s.Watch(ctx, in, errs) }()
		go func() {
			for {
				select {
				case set := <-in:
					select {
					case ups <- update{i, set}:
					case <-ctx.Done():
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	last := make([]*Set, len(m))
	told := map[string]bool{}
	running := len(m)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-fail:
			if err != nil {
				return err
			}
			if running--; running == 0 {
				<-ctx.Done()
				return nil
			}
		case u := <-ups:
			last[u.i] = &u.set
			if !allSent(last) {
				continue // the first union waits for every source's first set
			}
			out := Set{Left: map[string]string{}, At: u.set.At}
			seen := map[string]bool{}
			for i, s := range last {
				for _, w := range s.Workers {
					if seen[w.Name] {
						if !told[w.Name] {
							told[w.Name] = true
							emit(ctx, errs, &collectors.SourceError{Source: m[i].Name(), Kind: "config", At: time.Now(),
								Message: "worker " + w.Name + " is named by another source already: this one is left out"})
						}
						continue
					}
					seen[w.Name] = true
					out.Workers = append(out.Workers, w)
				}
				out.Routers = append(out.Routers, s.Routers...)
				for k, v := range s.Left {
					out.Left[k] = v
				}
			}
			select {
			case sets <- out:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

func allSent(last []*Set) bool {
	for _, s := range last {
		if s == nil {
			return false
		}
	}
	return true
}
