package views

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/charmbracelet/x/ansi"
	"github.com/kvtop/kvtop/themes"
)

// width is the display width of plain text. Most of what kvtop prints is
// ASCII plus a few single-width glyphs (bars, sparklines, arrows, braille),
// so the common case avoids grapheme segmentation entirely.
func width(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return ansi.StringWidth(s)
			}
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if !narrow(r) {
			return ansi.StringWidth(s)
		}
		n++
		i += size
	}
	return n
}

// narrow reports runes known to be one cell wide and never to join a
// grapheme cluster: the glyphs kvtop draws itself.
func narrow(r rune) bool {
	switch {
	case r >= 0x2500 && r <= 0x25FC: // box drawing, blocks, shades, geometric shapes (▶ ●); 25FD–25FE are emoji
		return true
	case r >= 0x2800 && r <= 0x28FF: // braille (charts)
		return true
	case r >= 0x2190 && r <= 0x21FF: // arrows
		return true
	case r >= 0x2010 && r <= 0x2027: // dashes, quotes, bullets, … and ‖
		return true
	}
	switch r {
	case '·', '×', '≥', '≤', '≠', '⚠', '✖', '✓', 'Δ', '▲', '▼':
		return true
	}
	return false
}

// Clean makes text from configs and the network safe to print on a
// terminal (for output outside the console, like kvtop snapshot --format text).
func Clean(s string) string { return clean(s) }

// clean replaces control characters and invalid UTF-8 with '?'. Names,
// reasons and errors come from configs and the network; a raw ESC in one
// would let it drive the operator's terminal.
func clean(s string) string {
	ok := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c >= utf8.RuneSelf {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	bad := func(i int, r rune) bool {
		return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || (r == utf8.RuneError && isBad(s[i:])) ||
			(r >= 0xad && !narrow(r) && unicode.Is(unicode.Cf, r) && r != 0x200c && r != 0x200d) // format marks can swallow the next cell
	}
	dirty := false
	for i, r := range s {
		if bad(i, r) {
			dirty = true
			break
		}
	}
	if !dirty {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i, r := range s {
		if bad(i, r) {
			b.WriteByte('?')
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isBad(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return r == utf8.RuneError && n <= 1
}

// truncate cuts plain text to w cells, ending in "…" when it cut.
func truncate(s string, w int) string {
	if w <= 0 {
		return ""
	}
	if width(s) <= w {
		return s
	}
	if w == 1 {
		return "…"
	}
	return ansi.Truncate(s, w, "…")
}

// fit truncates or pads plain text to exactly w cells.
func fit(s string, w int, right bool) string {
	s = truncate(clean(s), w)
	n := w - width(s)
	if n <= 0 {
		return s
	}
	out := s + strings.Repeat(" ", n)
	if right {
		out = strings.Repeat(" ", n) + s
	}
	// Grapheme rules can join a character with the padding; re-measure.
	for i := 0; i < 4 && width(out) < w; i++ {
		if right {
			out = " " + out
		} else {
			out += " "
		}
	}
	return out
}

// span is plain text with a role; a line is painted only after it has been
// cut to width, so escape codes are never truncated.
type span struct {
	text string
	role themes.Role
}

type line []span

func (l line) width() int {
	n := 0
	for _, s := range l {
		n += width(s.text)
	}
	return n
}

// render cuts the line to w cells (with "…") and paints each span.
func (l line) render(th *themes.Theme, w int) string {
	var b strings.Builder
	left := w
	for i, s := range l {
		if left <= 0 {
			break
		}
		t := clean(s.text)
		sw := width(t)
		if sw > left || (sw == left && i < len(l)-1 && l[i+1:].width() > 0) {
			t = truncate(t+"…", left) // guarantees the ellipsis when cut here
		}
		left -= width(t)
		b.WriteString(th.Paint(s.role, t))
	}
	return b.String()
}

// center puts text in the middle of w cells (left-padded only).
func center(s string, w int) string {
	s = truncate(s, w)
	n := (w - width(s)) / 2
	if n <= 0 {
		return s
	}
	return strings.Repeat(" ", n) + s
}

// safe is a last line of defence: a painted line wider than w is cut with
// an ANSI-aware truncation so the terminal never wraps.
func safe(s string, w int) string {
	if visWidth(s) <= w {
		return s
	}
	return ansi.Truncate(s, w, "…")
}

// visWidth is the display width of a painted string: escape sequences
// (CSI … final byte) take no room.
func visWidth(s string) int {
	if strings.IndexByte(s, 0x1b) < 0 {
		return width(s)
	}
	n := 0
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] != 0x1b || i+1 >= len(s) || s[i+1] != '[' {
			continue
		}
		n += width(s[start:i])
		j := i + 2
		for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
			j++
		}
		i, start = j, j+1
	}
	if start < len(s) {
		n += width(s[start:])
	}
	return n
}

// itemSep is what separates the items a figures line lists.
const itemSep = " · "

// items splits a line at its " · " separators into the items it lists,
// each keeping its spans' roles; a separator stays at the end of the item
// before it.
func items(l line) []line {
	var out []line
	cur := line{}
	for _, s := range l {
		t := s.text
		for {
			i := strings.Index(t, itemSep)
			if i < 0 {
				break
			}
			cur = append(cur, span{t[:i+len(itemSep)], s.role})
			out = append(out, cur)
			cur = line{}
			t = t[i+len(itemSep):]
		}
		if t != "" {
			cur = append(cur, span{t, s.role})
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// trimSep drops a trailing separator from l (in place).
func trimSep(l line) line {
	if n := len(l) - 1; n >= 0 {
		l[n].text = strings.TrimSuffix(l[n].text, itemSep)
	}
	return l
}

// ownWidth is an item's width without its trailing separator.
func ownWidth(it line) int {
	n := it.width()
	if k := len(it) - 1; k >= 0 && strings.HasSuffix(it[k].text, itemSep) {
		n -= width(itemSep)
	}
	return n
}

// cutItems renders a figures line in w cells: one too long ends after the
// last whole item that fits, with "…" — never inside an item, where a cut
// leaves a number without its unit ("scraped 1.0 s ago in 0.8…").
func cutItems(l line, w int, th *themes.Theme) string {
	if l.width() <= w {
		return l.render(th, w)
	}
	var kept line
	used := 0
	for _, it := range items(l) {
		if used+ownWidth(it)+2 > w { // " …"
			break
		}
		kept = append(kept, it...)
		used += it.width()
	}
	if len(kept) == 0 {
		return l.render(th, w)
	}
	return append(trimSep(kept), span{" …", themes.Dim}).render(th, w)
}

// wrapItems renders a figures line in lines of w cells, broken between
// its items, continuing under column indent.
func wrapItems(l line, indent, w int, th *themes.Theme) []string {
	if l.width() <= w {
		return []string{l.render(th, w)}
	}
	var out []string
	cur := line{}
	curW := 0
	for _, it := range items(l) {
		if curW+ownWidth(it) > w && curW > indent {
			out = append(out, trimSep(cur).render(th, w))
			cur, curW = line{{strings.Repeat(" ", indent), themes.Text}}, indent
		}
		cur = append(cur, it...)
		curW += it.width()
	}
	return append(out, trimSep(cur).render(th, w))
}
