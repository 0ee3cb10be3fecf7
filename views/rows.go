package views

import (
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/themes"
)

// Rows returns the length of the current screen's list and how many of its
// rows are visible at w×h, so the model can page and keep its scroll
// offset in step with what the view shows. Screens without a list return
// 0, 0; a terminal too small to draw shows no rows of any list.
func Rows(s *pool.Snapshot, st State, w, h int, th *themes.Theme) (total, visible int) {
	if s == nil {
		return 0, 0
	}
	small := w < MinWidth || h < MinHeight
	n := 0
	if !small {
		_, _, n = chrome(s, &st, w, h, th)
	}
	vis := func(v int) int {
		if small {
			return 0
		}
		return max(v, 0)
	}
	switch st.Screen {
	case ScreenPool:
		return len(PoolRows(s, st)), vis(n - 2)
	case ScreenStreams:
		rows := len(StreamRows(s, st))
		return rows, vis(streamsSplit(n-1, rows) - 1)
	case ScreenPrefixes:
		if small {
			return len(s.Prefixes), 0
		}
		return len(s.Prefixes), vis(n - 3 - len(verdict(s, w, th)))
	case ScreenDecisions:
		return len(DecisionRows(s, st)), vis(n - 2)
	case ScreenRouters:
		return len(s.Routers), vis(len(s.Routers))
	case ScreenHelp:
		if small {
			return 0, 0
		}
		return len(helpLines(s, &st, w, th)), vis(n)
	}
	return 0, 0
}
