package views

import (
	"strings"

	"github.com/kvtop/kvtop/themes"
)

// column describes one table column. Widths are fixed per render (computed
// from the whole data set, not the visible rows) so columns do not jitter
// while scrolling.
type column struct {
	title string
	width int
	// narrow is the width of a compact form (KV bar → number); the cell
	// function is told the width it gets and renders accordingly.
	narrow      int
	narrowTitle string
	right       bool
	// drop is the step at which the column disappears on narrow terminals
	// (1 first); 0 never drops. narrowAt is the step at which it narrows.
	drop     int
	narrowAt int
	// flex columns take the width left over, up to maxWidth.
	flex     bool
	maxWidth int
	// cell renders row i at width w as plain spans; the table pads or
	// truncates them and paints after.
	cell func(i, w int) line
}

// gutter is the left margin of every row: a space, the cursor ▶ and a mark
// (⚠ overheating, ✖ down), then a space.
const gutterWidth = 4

type table struct {
	cols []column
	// mark returns the row's mark glyph and its role ("" for none).
	mark func(i int) (string, themes.Role)
	// sortCol is the column index carrying the sort marker (-1: none).
	sortCol  int
	sortDesc bool
}

// layout decides which columns show at width w and how wide each is
// (0 = dropped): apply drop/narrow steps in order until the row fits, then
// give the slack to the flex column.
func (t *table) layout(w int) []int {
	avail := w - gutterWidth
	steps := 0
	for _, c := range t.cols {
		steps = max(steps, c.drop, c.narrowAt)
	}
	widths := make([]int, len(t.cols))
	for step := 0; step <= steps; step++ {
		total := 0
		n := 0
		for i, c := range t.cols {
			widths[i] = 0
			if c.drop > 0 && c.drop <= step {
				continue
			}
			widths[i] = c.width
			if c.narrowAt > 0 && c.narrowAt <= step {
				widths[i] = c.narrow
			}
			if i == t.sortCol { // room for the ▼/▲ marker
				title := c.title
				if c.narrowTitle != "" && widths[i] == c.narrow && c.narrowAt > 0 {
					title = c.narrowTitle
				}
				widths[i] = max(widths[i], width(title)+1)
			}
			total += widths[i]
			n++
		}
		total += 2 * max(n-1, 0)
		if total <= avail || step == steps {
			slack := avail - total
			for i, c := range t.cols {
				if c.flex && widths[i] > 0 && slack > 0 {
					grow := slack
					if c.maxWidth > 0 {
						grow = min(grow, c.maxWidth-widths[i])
					}
					if grow > 0 {
						widths[i] += grow
						slack -= grow
					}
				}
			}
			break
		}
	}
	return widths
}

// header renders the column titles, the sorted one marked ▼ or ▲.
func (t *table) header(th *themes.Theme, widths []int, w int) string {
	var b strings.Builder
	b.WriteString(strings.Repeat(" ", gutterWidth))
	first := true
	for i, c := range t.cols {
		if widths[i] == 0 {
			continue
		}
		if !first {
			b.WriteString("  ")
		}
		first = false
		title := c.title
		if c.narrowTitle != "" && widths[i] == c.narrow && c.narrowAt > 0 {
			title = c.narrowTitle
		}
		if i == t.sortCol {
			if t.sortDesc { // ▼ is the natural order (largest first), ▲ reversed
				title += "▲"
			} else {
				title += "▼"
			}
		}
		b.WriteString(th.Paint(themes.Title, fit(title, widths[i], c.right)))
	}
	return safe(strings.TrimRight(b.String(), " "), w)
}

// row renders row i. A selected row is painted as one block so its
// background is unbroken; its cells lose their own colours, which the
// cursor ▶ and the words still make up for.
func (t *table) row(th *themes.Theme, widths []int, i int, selected bool, w int) string {
	var b strings.Builder
	b.WriteByte(' ')
	if selected {
		b.WriteString("▶")
	} else {
		b.WriteByte(' ')
	}
	mark, mrole := " ", themes.Text
	if t.mark != nil {
		if m, r := t.mark(i); m != "" {
			mark, mrole = m, r
		}
	}
	if selected {
		b.WriteString(mark)
	} else {
		b.WriteString(th.Paint(mrole, mark))
	}
	b.WriteByte(' ')
	first := true
	for ci, c := range t.cols {
		cw := widths[ci]
		if cw == 0 {
			continue
		}
		if !first {
			b.WriteString("  ")
		}
		first = false
		writeCell(&b, th, c.cell(i, cw), cw, c.right, selected)
	}
	s := b.String()
	if selected {
		s = fit(s, w, false)
		return th.Paint(themes.Selected, s)
	}
	return safe(strings.TrimRight(s, " "), w)
}

// window returns the first visible row so the cursor stays on screen.
func window(cursor, offset, rows, visible int) int {
	if visible <= 0 || rows <= visible {
		return 0
	}
	offset = max(0, min(offset, rows-visible))
	if cursor < offset {
		offset = cursor
	}
	if cursor >= offset+visible {
		offset = cursor - visible + 1
	}
	return offset
}

// render draws the header and up to h-1 rows starting at the window that
// keeps cursor visible, padding to exactly h lines.
func (t *table) render(th *themes.Theme, rows, cursor, offset, w, h int) []string {
	if h <= 0 {
		return nil
	}
	widths := t.layout(w)
	out := make([]string, 0, h)
	out = append(out, t.header(th, widths, w))
	visible := h - 1
	off := window(cursor, offset, rows, visible)
	for i := off; i < rows && len(out) < h; i++ {
		out = append(out, t.row(th, widths, i, i == cursor, w))
	}
	for len(out) < h {
		out = append(out, "")
	}
	return out
}

// writeCell pads or truncates a cell's spans to w cells and paints them
// (unless the row is selected and painted whole).
func writeCell(b *strings.Builder, th *themes.Theme, l line, w int, right, selected bool) {
	for i := range l {
		l[i].text = clean(l[i].text)
	}
	lw := l.width()
	if lw > w {
		var t strings.Builder
		for _, s := range l {
			t.WriteString(s.text)
		}
		txt := truncate(t.String(), w)
		if !selected && len(l) > 0 {
			txt = th.Paint(l[0].role, txt)
		}
		b.WriteString(txt)
		return
	}
	pad := strings.Repeat(" ", w-lw)
	if right {
		b.WriteString(pad)
	}
	for _, s := range l {
		if selected {
			b.WriteString(s.text)
		} else {
			b.WriteString(th.Paint(s.role, s.text))
		}
	}
	if !right {
		b.WriteString(pad)
	}
}

// cell1 is a one-span cell.
func cell1(text string, role themes.Role) line { return line{{text, role}} }
