// Package themes holds kvtop's palettes and turns them into lipgloss styles,
// once per theme. Nothing else in kvtop chooses colours.
package themes

import "fmt"

// Role names what a piece of text means; a theme decides how it looks.
type Role int

// The roles, in the order the help screen's colour legend lists them.
const (
	Text      Role = iota // ordinary text
	Header                // the header line(s)
	Title                 // section and table titles
	Dim                   // secondary text, units, unknown values
	OK                    // healthy states
	Warn                  // needs a look: replaying, joined late, saturated
	Crit                  // act now: overheating, history lost, down
	Selected              // the row under the cursor (background)
	Border                // rules and separators
	BarFull               // filled part of a usage bar
	BarEmpty              // empty part of a usage bar
	Spark                 // sparklines and charts
	Heat0                 // heat cell: no share
	Heat1                 // heat cell: small share
	Heat2                 // heat cell: moderate share
	Heat3                 // heat cell: large share
	Heat4                 // heat cell: most of the traffic
	Tab                   // screen tabs in the footer
	TabActive             // the current screen's tab (background)
	Key                   // key names in hints and help

	numRoles
)

// HeatLevels is the number of heat roles (Heat0..Heat4).
const HeatLevels = 5

var roleInfo = [numRoles]struct{ name, desc string }{
	Text:      {"text", "ordinary text"},
	Header:    {"header", "header line"},
	Title:     {"title", "section and column titles"},
	Dim:       {"dim", "units, secondary and unknown (–) values"},
	OK:        {"ok", "healthy: ok, live"},
	Warn:      {"warn", "needs a look: saturated, replaying, joined late, recovering"},
	Crit:      {"crit", "act now: OVERHEATING, HISTORY LOST, down, errors"},
	Selected:  {"selected", "row under the cursor ▶ (colour is the background)"},
	Border:    {"border", "rules and separators"},
	BarFull:   {"bar-full", "filled part of a KV-usage or share bar"},
	BarEmpty:  {"bar-empty", "empty part of a bar"},
	Spark:     {"spark", "sparklines and charts"},
	Heat0:     {"heat-0", "heat cell · no share"},
	Heat1:     {"heat-1", "heat cell ░ under 10%"},
	Heat2:     {"heat-2", "heat cell ▒ 10–30%"},
	Heat3:     {"heat-3", "heat cell ▓ 30–60%"},
	Heat4:     {"heat-4", "heat cell █ 60% and more"},
	Tab:       {"tab", "screen tabs"},
	TabActive: {"tab-active", "current screen tab (colour is the background)"},
	Key:       {"key", "key names"},
}

// String is the role's name as used in config overrides.
func (r Role) String() string {
	if r < 0 || r >= numRoles {
		return fmt.Sprintf("role(%d)", int(r))
	}
	return roleInfo[r].name
}

// Description says what the role marks, for the help screen's legend.
func (r Role) Description() string {
	if r < 0 || r >= numRoles {
		return ""
	}
	return roleInfo[r].desc
}

// Roles lists every role in legend order.
func Roles() []Role {
	rs := make([]Role, numRoles)
	for i := range rs {
		rs[i] = Role(i)
	}
	return rs
}

// RoleByName finds a role by its config name.
func RoleByName(name string) (Role, bool) {
	for i, ri := range roleInfo {
		if ri.name == name {
			return Role(i), true
		}
	}
	return 0, false
}

// HeatRole maps a heat level (clamped to 0..HeatLevels-1) to its role.
func HeatRole(level int) Role {
	level = max(0, min(level, HeatLevels-1))
	return Heat0 + Role(level)
}

// bgRole reports roles whose colour is a background.
func bgRole(r Role) bool { return r == Selected || r == TabActive }
