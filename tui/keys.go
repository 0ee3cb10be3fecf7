package tui

import (
	"strings"

	"github.com/charmbracelet/bubbles/key"
	"github.com/kvtop/kvtop/views"
)

// keyMap is every key the console knows. Keys that do nothing on the
// current screen are disabled, so they vanish from the footer and the help
// screen, which are both generated from this map.
type keyMap struct {
	Help, Quit                              key.Binding
	NextTab, PrevTab, Screens               key.Binding
	Up, Down, PageUp, PageDown, Top, Bottom key.Binding
	Enter, Back                             key.Binding
	Filter, Sort, Reverse, Follow, Engines  key.Binding
	Freeze, Slower, Faster, Theme           key.Binding
}

func newKeyMap() keyMap {
	b := func(keys []string, help, desc string) key.Binding {
		return key.NewBinding(key.WithKeys(keys...), key.WithHelp(help, desc))
	}
	return keyMap{
		Help:     b([]string{"?"}, "?", "help: keys, colours, thresholds"),
		Quit:     b([]string{"q", "ctrl+c"}, "q", "quit"),
		NextTab:  b([]string{"tab"}, "tab", "next screen"),
		PrevTab:  b([]string{"shift+tab"}, "shift+tab", "previous screen"),
		Screens:  b([]string{"1", "2", "3", "4", "5", "6"}, "1-6", "pool worker streams prefixes decisions routers"),
		Up:       b([]string{"up", "k"}, "↑/k", "up"),
		Down:     b([]string{"down", "j"}, "↓/j", "down"),
		PageUp:   b([]string{"pgup", "ctrl+u"}, "pgup", "page up"),
		PageDown: b([]string{"pgdown", "ctrl+d"}, "pgdn", "page down"),
		Top:      b([]string{"home", "g"}, "g/home", "first row"),
		Bottom:   b([]string{"end", "G"}, "G/end", "last row"),
		Enter:    b([]string{"enter"}, "enter", "open"),
		Back:     b([]string{"esc"}, "esc", "back"),
		Filter:   b([]string{"/"}, "/", "filter"),
		Sort:     b([]string{"s"}, "s", "sort by next column"),
		Reverse:  b([]string{"S"}, "S", "reverse sort"),
		Follow:   b([]string{"F"}, "F", "follow newest"),
		Engines:  b([]string{"e"}, "e", "unfold DP engines"),
		Freeze:   b([]string{"f"}, "f", "freeze display"),
		Slower:   b([]string{"+", "="}, "+", "refresh slower"),
		Faster:   b([]string{"-", "_"}, "-", "refresh faster (floor 250ms)"),
		Theme:    b([]string{"t"}, "t", "next theme"),
	}
}

// keyContext is what decides which keys work.
type keyContext struct {
	screen    views.Screen
	filtered  bool // the current list has a filter applied
	follow    bool
	frozen    bool
	engines   bool
	hasWorker bool // a worker screen has something to show
}

// setFor enables the keys that do something in ctx and words the
// toggles by what they will do.
func (k *keyMap) setFor(c keyContext) {
	list := c.screen == views.ScreenPool || c.screen == views.ScreenStreams || c.screen == views.ScreenPrefixes ||
		c.screen == views.ScreenDecisions || c.screen == views.ScreenRouters || c.screen == views.ScreenHelp ||
		(c.screen == views.ScreenWorker && c.hasWorker)
	for _, b := range []*key.Binding{&k.Up, &k.Down, &k.PageUp, &k.PageDown, &k.Top, &k.Bottom} {
		b.SetEnabled(list)
	}
	if c.screen == views.ScreenWorker {
		k.Up.SetHelp("↑/k", "previous worker")
		k.Down.SetHelp("↓/j", "next worker")
	} else if c.screen == views.ScreenHelp {
		k.Up.SetHelp("↑/k", "scroll up")
		k.Down.SetHelp("↓/j", "scroll down")
	} else {
		k.Up.SetHelp("↑/k", "up")
		k.Down.SetHelp("↓/j", "down")
	}
	k.PageUp.SetEnabled(list && c.screen != views.ScreenWorker)
	k.PageDown.SetEnabled(list && c.screen != views.ScreenWorker)

	filterable := c.screen == views.ScreenPool || c.screen == views.ScreenStreams || c.screen == views.ScreenDecisions
	k.Filter.SetEnabled(filterable)
	sortable := c.screen == views.ScreenPool || c.screen == views.ScreenStreams
	k.Sort.SetEnabled(sortable)
	k.Reverse.SetEnabled(sortable)
	k.Follow.SetEnabled(c.screen == views.ScreenDecisions)
	if c.follow {
		k.Follow.SetHelp("F", "pause follow")
	} else {
		k.Follow.SetHelp("F", "follow newest")
	}
	k.Engines.SetEnabled(c.screen == views.ScreenPool)
	if c.engines {
		k.Engines.SetHelp("e", "fold DP engines")
	} else {
		k.Engines.SetHelp("e", "unfold DP engines")
	}
	if c.frozen {
		k.Freeze.SetHelp("f", "unfreeze display")
	} else {
		k.Freeze.SetHelp("f", "freeze display")
	}
	switch c.screen {
	case views.ScreenPool, views.ScreenStreams:
		k.Enter.SetEnabled(true)
		k.Enter.SetHelp("enter", "open worker")
	case views.ScreenDecisions:
		k.Enter.SetEnabled(true)
		k.Enter.SetHelp("enter", "open record")
	default:
		k.Enter.SetEnabled(false)
	}
	switch {
	case c.screen == views.ScreenWorker || c.screen == views.ScreenDecisionDetail || c.screen == views.ScreenHelp:
		k.Back.SetEnabled(true)
		k.Back.SetHelp("esc", "back")
	case filterable && c.filtered:
		k.Back.SetEnabled(true)
		k.Back.SetHelp("esc", "clear filter")
	default:
		k.Back.SetEnabled(false)
	}
	if c.screen == views.ScreenHelp {
		k.Help.SetHelp("?", "close help")
	} else {
		k.Help.SetHelp("?", "help: keys, colours, thresholds")
	}
}

// groups is the keymap as the help screen shows it: enabled keys only.
func (k *keyMap) groups() []views.KeyGroup {
	g := []struct {
		title string
		keys  []key.Binding
	}{
		{"SCREENS", []key.Binding{k.NextTab, k.PrevTab, k.Screens, k.Enter, k.Back, k.Help}},
		{"MOVE", []key.Binding{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom}},
		{"LIST", []key.Binding{k.Filter, k.Sort, k.Reverse, k.Follow, k.Engines}},
		{"DISPLAY", []key.Binding{k.Freeze, k.Slower, k.Faster, k.Theme, k.Quit}},
	}
	out := make([]views.KeyGroup, 0, len(g))
	for _, x := range g {
		grp := views.KeyGroup{Title: x.title}
		for _, b := range x.keys {
			if b.Enabled() {
				grp.Keys = append(grp.Keys, views.KeyHelp{Key: b.Help().Key, Desc: b.Help().Desc})
			}
		}
		if len(grp.Keys) > 0 {
			out = append(out, grp)
		}
	}
	return out
}

// hints is the footer's short help, most useful first.
func (k *keyMap) hints() []views.KeyHelp {
	short := map[*key.Binding]string{
		&k.Help: "help", &k.Enter: "open", &k.Back: "back", &k.Filter: "filter", &k.Sort: "sort",
		&k.Follow: "follow", &k.Engines: "engines", &k.Freeze: "freeze", &k.Theme: "theme", &k.Quit: "quit",
	}
	if k.Back.Help().Desc == "clear filter" {
		short[&k.Back] = "clear filter"
	}
	if k.Freeze.Help().Desc == "unfreeze display" {
		short[&k.Freeze] = "unfreeze"
	}
	if k.Follow.Help().Desc == "pause follow" {
		short[&k.Follow] = "pause"
	}
	if k.Help.Help().Desc == "close help" {
		short[&k.Help] = "close help"
	}
	var out []views.KeyHelp
	for _, b := range []*key.Binding{&k.Help, &k.Back, &k.Enter, &k.Filter, &k.Sort, &k.Follow, &k.Freeze, &k.Engines, &k.Theme, &k.Quit} {
		if b.Enabled() {
			out = append(out, views.KeyHelp{Key: b.Help().Key, Desc: short[b]})
		}
	}
	return out
}

// all lists every binding, for tests that check the help is complete.
func (k *keyMap) all() []key.Binding {
	return []key.Binding{k.Help, k.Quit, k.NextTab, k.PrevTab, k.Screens, k.Up, k.Down, k.PageUp, k.PageDown,
		k.Top, k.Bottom, k.Enter, k.Back, k.Filter, k.Sort, k.Reverse, k.Follow, k.Engines, k.Freeze, k.Slower, k.Faster, k.Theme}
}

// helpGroups are the keys of the screen help was opened from, then the
// keys that only work on other screens, each with where it works.
func helpGroups(c keyContext) []views.KeyGroup {
	k := newKeyMap()
	k.setFor(c)
	groups := k.groups()
	here := k.all()
	var other []views.KeyHelp
	for i, b := range here {
		if b.Enabled() {
			continue
		}
		// What the key does elsewhere, grouped by meaning:
		// "clear filter (pool, streams); back (worker, decision)".
		var descs []string
		where := map[string][]string{}
		for _, sc := range append(append([]views.Screen(nil), views.Tabs...), views.ScreenDecisionDetail) {
			k2 := newKeyMap()
			k2.setFor(keyContext{screen: sc, filtered: true, hasWorker: true})
			if b2 := k2.all()[i]; b2.Enabled() {
				d := b2.Help().Desc
				if where[d] == nil {
					descs = append(descs, d)
				}
				where[d] = append(where[d], sc.String())
			}
		}
		parts := make([]string, len(descs))
		for j, d := range descs {
			parts[j] = d + " (" + strings.Join(where[d], ", ") + ")"
		}
		if len(parts) > 0 {
			other = append(other, views.KeyHelp{Key: b.Help().Key, Desc: strings.Join(parts, "; ")})
		}
	}
	if len(other) > 0 {
		groups = append(groups, views.KeyGroup{Title: "ON OTHER SCREENS", Keys: other})
	}
	return groups
}

// HelpFor returns the footer hints and help groups a screen shows in the
// given state (filter, follow, freeze, engines). Golden tests use it so the
// golden screens are generated from the real keymap. For the help screen,
// the groups are those of the Pool screen it was opened from.
func HelpFor(st views.State) ([]views.KeyHelp, []views.KeyGroup) {
	c := keyContext{screen: st.Screen, filtered: st.List().Filter != "", follow: st.Follow, frozen: st.Frozen,
		engines: st.Engines, hasWorker: true}
	k := newKeyMap()
	k.setFor(c)
	if st.Screen == views.ScreenHelp {
		c.screen = views.ScreenPool
		st.Screen = views.ScreenPool
		c.filtered = st.List().Filter != ""
		return k.hints(), helpGroups(c)
	}
	return k.hints(), k.groups()
}
