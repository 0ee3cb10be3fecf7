package views

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kvtop/kvtop/snapshot"
)

// Binding is one key: the key names the console matches, what the help and
// the footer say about it, and, for a screen's own keys, what it does.
// Keys that do nothing on the current screen are not bound at all, so they
// vanish from the footer and the help, which are both generated from the
// bindings (Keys).
type Binding struct {
	ID    string   // what the console does with it: a Key… constant, or a screen's own name for it
	Keys  []string // key names as Bubble Tea reports them: "q", "ctrl+c"
	Key   string   // the keys as help shows them: "↑/k"
	Desc  string   // what it does, in the help: "open worker"
	Hint  string   // its word in the footer; "" keeps it out
	Rank  int      // its place in the footer, lowest first (help 10 … quit 100)
	Group string   // its group in the help: SCREENS, MOVE, LIST or DISPLAY
	// Do is what a screen's own key does (tui keeps the cursor on its
	// item around it); the shared keys leave it nil and tui acts on ID.
	Do func(s *snapshot.Snapshot, st *State)
}

// The IDs of the keys tui acts on itself.
const (
	KeyHelp     = "help"
	KeyQuit     = "quit"
	KeyNextTab  = "next-tab"
	KeyPrevTab  = "prev-tab"
	KeyScreens  = "screens" // 1…N: the tab of that number
	KeyUp       = "up"
	KeyDown     = "down"
	KeyPageUp   = "page-up"
	KeyPageDown = "page-down"
	KeyTop      = "top"
	KeyBottom   = "bottom"
	KeyEnter    = "enter"
	KeyBack     = "back"
	KeyFilter   = "filter"
	KeySort     = "sort"
	KeyReverse  = "reverse"
	KeyFreeze   = "freeze"
	KeySlower   = "slower"
	KeyFaster   = "faster"
	KeyTheme    = "theme"

	// The replay's time controls (bound only in a replay).
	KeyReplayPause   = "replay-pause"
	KeyReplayBack    = "replay-back"
	KeyReplayForward = "replay-forward"
	KeyReplaySlower  = "replay-slower"
	KeyReplayFaster  = "replay-faster"
	KeyReplayStart   = "replay-start"
	KeyReplayEnd     = "replay-end"
)

// Help groups, in the order the help shows them.
const (
	groupScreens = "SCREENS"
	groupMove    = "MOVE"
	groupList    = "LIST"
	groupDisplay = "DISPLAY"
	groupReplay  = "REPLAY"
)

var groupOrder = []string{groupScreens, groupMove, groupList, groupDisplay, groupReplay}

func bind(id, group string, keys []string, key, desc string) Binding {
	return Binding{ID: id, Group: group, Keys: keys, Key: key, Desc: desc}
}

// hinted gives a binding its footer word and place.
func (b Binding) hinted(word string, rank int) Binding {
	b.Hint, b.Rank = word, rank
	return b
}

// does gives a screen's own binding its action.
func (b Binding) does(f func(s *snapshot.Snapshot, st *State)) Binding {
	b.Do = f
	return b
}

// The keys every screen shares, and the words of the shared list keys.
var (
	keyNextTab  = bind(KeyNextTab, groupScreens, []string{"tab"}, "tab", "next screen")
	keyPrevTab  = bind(KeyPrevTab, groupScreens, []string{"shift+tab"}, "shift+tab", "previous screen")
	keyEnter    = bind(KeyEnter, groupScreens, []string{"enter"}, "enter", "").hinted("open", 30)
	keyBack     = bind(KeyBack, groupScreens, []string{"esc"}, "esc", "").hinted("", 20)
	keyHelp     = bind(KeyHelp, groupScreens, []string{"?"}, "?", "help: keys, colours, thresholds").hinted("help", 10)
	keyUp       = bind(KeyUp, groupMove, []string{"up", "k"}, "↑/k", "")
	keyDown     = bind(KeyDown, groupMove, []string{"down", "j"}, "↓/j", "")
	keyPageUp   = bind(KeyPageUp, groupMove, []string{"pgup", "ctrl+u"}, "pgup", "page up")
	keyPageDown = bind(KeyPageDown, groupMove, []string{"pgdown", "ctrl+d"}, "pgdn", "page down")
	keyTop      = bind(KeyTop, groupMove, []string{"home", "g"}, "g/home", "first row")
	keyBottom   = bind(KeyBottom, groupMove, []string{"end", "G"}, "G/end", "last row")
	keyFilter   = bind(KeyFilter, groupList, []string{"/"}, "/", "filter").hinted("filter", 40)
	keySort     = bind(KeySort, groupList, []string{"s"}, "s", "sort by next column").hinted("sort", 50)
	keyReverse  = bind(KeyReverse, groupList, []string{"S"}, "S", "reverse sort")
	keyFreeze   = bind(KeyFreeze, groupDisplay, []string{"f"}, "f", "freeze display").hinted("freeze", 70)
	keyUnfreeze = bind(KeyFreeze, groupDisplay, []string{"f"}, "f", "unfreeze display").hinted("unfreeze", 70)
	keySlower   = bind(KeySlower, groupDisplay, []string{"+", "="}, "+", "refresh slower")
	keyFaster   = bind(KeyFaster, groupDisplay, []string{"-", "_"}, "-", "refresh faster (floor 250ms)")
	keyTheme    = bind(KeyTheme, groupDisplay, []string{"t"}, "t", "next theme").hinted("theme", 90)
	keyQuit     = bind(KeyQuit, groupScreens, []string{"q", "ctrl+c"}, "q", "quit").hinted("quit", 100)

	keyReplayPause   = bind(KeyReplayPause, groupReplay, []string{" "}, "space", "pause the replay").hinted("pause", 15)
	keyReplayResume  = bind(KeyReplayPause, groupReplay, []string{" "}, "space", "resume the replay").hinted("play", 15)
	keyReplayBack    = bind(KeyReplayBack, groupReplay, []string{"left"}, "←", "back 10 s").hinted("-10s", 16)
	keyReplayForward = bind(KeyReplayForward, groupReplay, []string{"right"}, "→", "forward 10 s").hinted("+10s", 17)
	keyReplaySlower  = bind(KeyReplaySlower, groupReplay, []string{"["}, "[", "speed ×½")
	keyReplayFaster  = bind(KeyReplayFaster, groupReplay, []string{"]"}, "]", "speed ×2")
	keyReplayStart   = bind(KeyReplayStart, groupReplay, []string{"g"}, "g", "journal start")
	keyReplayEnd     = bind(KeyReplayEnd, groupReplay, []string{"G"}, "G", "journal end")
)

// replayKeys are the time controls of a replay; g and G are theirs, so
// the first and last row are home and end only.
func replayKeys(r *Replay) []Binding {
	pause := keyReplayPause
	if r.Paused || r.AtEnd {
		pause = keyReplayResume
	}
	return []Binding{pause, keyReplayBack, keyReplayForward, keyReplaySlower, keyReplayFaster, keyReplayStart, keyReplayEnd}
}

// rowEnds are the first/last row keys, without g and G in a replay.
func rowEnds(st *State) []Binding {
	if st.Replay == nil {
		return []Binding{keyTop, keyBottom}
	}
	top, bottom := keyTop, keyBottom
	top.Keys, top.Key = []string{"home"}, "home"
	bottom.Keys, bottom.Key = []string{"end"}, "end"
	return []Binding{top, bottom}
}

// worded is a shared binding with a screen's words for it.
func worded(b Binding, desc string) Binding {
	b.Desc = desc
	return b
}

// Keys are the bindings that work on the current screen in this state, in
// the help's order, worded for the state (F says "pause follow" while
// following). The console matches keys against them and the footer and
// help are drawn from them.
func Keys(s *snapshot.Snapshot, st *State) []Binding {
	sc := st.screen()
	sk := ScreenKeys{}
	if sc.Keys != nil {
		sk = sc.Keys(s, st)
	}
	out := make([]Binding, 0, 24)
	own := func(group string) {
		for _, b := range sk.Own {
			if b.Group == "" {
				b.Group = groupList
			}
			if b.Group == group {
				out = append(out, b)
			}
		}
	}

	// Quit first: the help lists it before anything else, and the footer
	// keeps it whatever else it drops.
	out = append(out, keyQuit, keyNextTab, keyPrevTab, tabKeys())
	if sk.Enter != "" && sc.Enter != nil {
		out = append(out, worded(keyEnter, sk.Enter))
	}
	switch {
	case sk.Back != "":
		out = append(out, worded(keyBack, sk.Back).hinted(sk.Back, keyBack.Rank))
	case sc.Filter && st.List().Filter != "":
		out = append(out, worded(keyBack, "clear filter").hinted("clear filter", keyBack.Rank))
	}
	if sk.Help != "" {
		out = append(out, worded(keyHelp, sk.Help).hinted(sk.Help, keyHelp.Rank))
	} else {
		out = append(out, keyHelp)
	}
	own(groupScreens)

	if sk.Up != "" {
		out = append(out, worded(keyUp, sk.Up))
	}
	if sk.Down != "" {
		out = append(out, worded(keyDown, sk.Down))
	}
	if sk.Pages {
		out = append(out, keyPageUp, keyPageDown)
	}
	if sk.Ends {
		out = append(out, rowEnds(st)...)
	}
	own(groupMove)

	if sc.Filter {
		out = append(out, keyFilter)
	}
	if len(sc.Sorts) > 0 {
		out = append(out, keySort, keyReverse)
	}
	own(groupList)

	if st.Frozen {
		out = append(out, keyUnfreeze)
	} else {
		out = append(out, keyFreeze)
	}
	if st.Remote != nil { // the collector's refresh: +/- only say so
		out = append(out, worded(keySlower, "refresh: set by the collector"), worded(keyFaster, "refresh: set by the collector"), keyTheme)
	} else {
		out = append(out, keySlower, keyFaster, keyTheme)
	}
	own(groupDisplay)
	if st.Replay != nil {
		out = append(out, replayKeys(st.Replay)...)
	}
	return out
}

// tabKeys is 1…N, one number key per tab.
func tabKeys() Binding {
	tabs := Tabs()
	nums := make([]string, len(tabs))
	names := make([]string, len(tabs))
	for i, t := range tabs {
		nums[i], names[i] = strconv.Itoa(i+1), t.Name
	}
	return bind(KeyScreens, groupScreens, nums, "1-"+nums[len(nums)-1], strings.Join(names, " "))
}

func groupRank(g string) int {
	for i, x := range groupOrder {
		if x == g {
			return i
		}
	}
	return len(groupOrder)
}

// Match returns the binding a key (as Bubble Tea names it) triggers.
func Match(bs []Binding, key string) (Binding, bool) {
	for _, b := range bs {
		for _, k := range b.Keys {
			if k == key {
				return b, true
			}
		}
	}
	return Binding{}, false
}

// hints are the footer's key words, most useful first.
func hints(bs []Binding) []Binding {
	var out []Binding
	for _, b := range bs {
		if b.Hint != "" {
			out = append(out, b)
		}
	}
	slices.SortStableFunc(out, func(a, b Binding) int { return a.Rank - b.Rank })
	return out
}

// keyGroup is a titled group of bindings on the help screen.
type keyGroup struct {
	title string
	keys  []Binding
}

// helpGroups are the keys of the screen help was opened from, by group,
// then the keys that only work on other screens, each saying where.
func helpGroups(s *snapshot.Snapshot, st *State) []keyGroup {
	from := *st
	from.Screen = st.helpFrom()
	here := Keys(s, &from)
	var groups []keyGroup
	for _, g := range groupOrder {
		grp := keyGroup{title: g}
		for _, b := range here {
			if b.Group == g {
				grp.keys = append(grp.keys, b)
			}
		}
		if len(grp.keys) > 0 {
			groups = append(groups, grp)
		}
	}
	if other := elsewhere(s, st.Replay, here); len(other) > 0 {
		groups = append(groups, keyGroup{title: "ON OTHER SCREENS", keys: other})
	}
	return groups
}

// elsewhere lists the keys not in here that work on other screens, with
// what each does where, grouped by meaning: "clear filter (pool, streams);
// back (worker, decision)". Every screen is asked as it would be with a
// filter applied, so esc's "clear filter" is found.
func elsewhere(s *snapshot.Snapshot, replay *Replay, here []Binding) []Binding {
	bound := map[string]bool{}
	for _, b := range here {
		bound[b.ID] = true
	}
	type use struct {
		b     Binding
		descs []string
		where map[string][]string
	}
	var order []string
	uses := map[string]*use{}
	for _, sc := range Screens {
		if sc.TabScreen() == nil { // help: its keys are its own
			continue
		}
		st := State{Screen: sc, Replay: replay}
		st.List().Filter = "…"
		for _, b := range Keys(s, &st) {
			if bound[b.ID] {
				continue
			}
			u := uses[b.ID]
			if u == nil {
				u = &use{b: b, where: map[string][]string{}}
				uses[b.ID] = u
				order = append(order, b.ID)
			}
			if u.where[b.Desc] == nil {
				u.descs = append(u.descs, b.Desc)
			}
			u.where[b.Desc] = append(u.where[b.Desc], sc.Name)
		}
	}
	// Keys in the help's order: by group, then as first seen.
	sort.SliceStable(order, func(a, b int) bool {
		return groupRank(uses[order[a]].b.Group) < groupRank(uses[order[b]].b.Group)
	})
	var out []Binding
	for _, id := range order {
		u := uses[id]
		parts := make([]string, len(u.descs))
		for j, d := range u.descs {
			parts[j] = d + " (" + strings.Join(u.where[d], ", ") + ")"
		}
		out = append(out, Binding{ID: id, Key: u.b.Key, Desc: strings.Join(parts, "; ")})
	}
	return out
}
