package tui

import (
	"github.com/kvtop/kvtop/journal"
	"github.com/kvtop/kvtop/views"
)

// Replay is the console's source on a journal replay: its snapshots, and
// the replay keys turned into its time controls.
func Replay(r *journal.Replay) Replayer { return replaySource{r} }

type replaySource struct{ *journal.Replay }

var replayControls = map[string]journal.Control{
	views.KeyReplayPause:   journal.Pause,
	views.KeyReplayBack:    journal.Back,
	views.KeyReplayForward: journal.Forward,
	views.KeyReplaySlower:  journal.Slower,
	views.KeyReplayFaster:  journal.Faster,
	views.KeyReplayStart:   journal.ToStart,
	views.KeyReplayEnd:     journal.ToEnd,
}

func (r replaySource) ReplayKey(id string) {
	if c, ok := replayControls[id]; ok {
		r.Control(c)
	}
}

func (r replaySource) ReplayState() views.Replay {
	st := r.Status()
	return views.Replay{Paused: st.Paused, AtEnd: st.AtEnd, Seeking: st.Seeking, Speed: journal.Speed(st.Speed)}
}
