package journal

import (
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// A change of the watched set of targets, tag 't'.
func init() { register(tagTarget, (*encoder).target, (*decoder).target) }

// target writes a change of the watched set. They are rare (a pod event),
// so the pod's words are written as they are, without cleverness.
func (e *encoder) target(v *collectors.TargetChange) {
	w := e.beginAt(tagTarget, v.At)
	w.sym(v.Name)
	w.uv(uint64(v.Role))
	w.sym(string(v.Kind))
	w.sym(v.Reason)
	w.count(len(v.Aliases), v.Aliases == nil)
	for _, a := range v.Aliases {
		w.sym(a)
	}
	w.flag(v.NoMetrics)
	k := v.Kube
	w.flag(k != nil)
	if k != nil {
		for _, s := range []string{k.Pod, k.Namespace, k.UID, k.Node, k.IP, k.Phase, k.Reason, k.Access, k.AccessNote} {
			w.sym(s)
		}
		w.str(k.Message)
		w.flag(k.Ready)
		w.flag(k.New)
		w.iv(int64(k.Restarts))
		w.tm(k.Started)
		w.tm(k.Created)
		w.flag(k.LastTermination != nil)
		if lt := k.LastTermination; lt != nil {
			w.sym(lt.Reason)
			w.iv(int64(lt.ExitCode))
			w.tm(lt.At)
		}
		// Added after the first release (issue 27): at the end, only
		// when set, so an older journal's record ends before it.
		if k.Role != "" {
			w.sym(k.Role)
		}
	}
	e.end()
}

func (d *decoder) target(at time.Time) *collectors.TargetChange {
	r := &d.r
	v := &collectors.TargetChange{At: at}
	v.Name = r.sym()
	v.Role = collectors.Role(r.uv())
	v.Kind = collectors.TargetChangeKind(r.sym())
	v.Reason = r.sym()
	if n, isNil := r.count(1); !isNil {
		v.Aliases = make([]string, n)
		for i := 0; i < n && r.err == nil; i++ {
			v.Aliases[i] = r.sym()
		}
	}
	v.NoMetrics = r.flag()
	if r.flag() {
		k := &collectors.KubeInfo{}
		for _, s := range []*string{&k.Pod, &k.Namespace, &k.UID, &k.Node, &k.IP, &k.Phase, &k.Reason, &k.Access, &k.AccessNote} {
			*s = r.sym()
		}
		k.Message = r.str()
		k.Ready = r.flag()
		k.New = r.flag()
		k.Restarts = r.int()
		k.Started = r.tm()
		k.Created = r.tm()
		if r.flag() {
			k.LastTermination = &collectors.Termination{Reason: r.sym(), ExitCode: r.int()}
			k.LastTermination.At = r.tm()
		}
		if len(r.b) > 0 {
			k.Role = r.sym()
		}
		v.Kube = k
	}
	return v
}
