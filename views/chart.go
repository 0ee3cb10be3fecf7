package views

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/NimbleMarkets/ntcharts/canvas"
	"github.com/NimbleMarkets/ntcharts/canvas/runes"
	tslc "github.com/NimbleMarkets/ntcharts/linechart/timeserieslinechart"
	"github.com/charmbracelet/lipgloss"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/themes"
)

// chartSpec is one time series panel on the Worker screen.
type chartSpec struct {
	title   string
	short   string // title in the one-line form
	pts     []pool.Point
	percent bool // values are fractions 0..1, labelled in %
	now     string
}

// chart draws a series over the window with ntcharts: explicit time and
// value ranges (its auto range only grows), whole-second time stamps, and
// x labels relative to the snapshot ("-60s", "now") so the picture depends
// on the snapshot alone. It is only built when the screen is re-rendered,
// which the console does only when the snapshot, size or state changed.
func chart(c chartSpec, end time.Time, window time.Duration, w, h int, th *themes.Theme) []string {
	title := line{{" " + c.title, themes.Title}, {"  now " + c.now, themes.Dim}}.render(th, w)
	out := []string{title}
	ch := h - 1
	if ch < 3 || w < 20 {
		return out
	}
	start := end.Add(-window).Truncate(time.Second)
	end = end.Truncate(time.Second)
	// Four y steps on a graph a multiple of 4 rows high keep the labels
	// round: 0 25 50 75 100%, or multiples of ymax/4 for counts.
	gh := (ch - 2) / 4 * 4
	if gh < 4 {
		gh = ch - 2
	}
	ch = gh + 2
	ystep := max(1, gh/4)
	ymax := 1.0
	yfmt := func(_ int, v float64) string { return fmt.Sprintf("%.0f%%", v*100) }
	if !c.percent {
		ymax = math.Max(4, math.Ceil(seriesMax(c.pts)*1.1/4)*4)
		yfmt = func(_ int, v float64) string { return numf(math.Round(v)) }
	}
	xfmt := func(_ int, v float64) string {
		d := end.Unix() - int64(v)
		if d <= 0 {
			return "now"
		}
		return fmt.Sprintf("-%ds", d)
	}
	m := tslc.New(w, ch,
		tslc.WithTimeRange(start, end),
		tslc.WithYRange(0, ymax),
		tslc.WithXYSteps(max(8, (w-8)/4), ystep),
		tslc.WithXLabelFormatter(xfmt),
		tslc.WithYLabelFormatter(yfmt),
		tslc.WithAxesStyles(tagAxis, tagLabel),
		tslc.WithStyle(tagLine),
		tslc.WithLineStyle(runes.ThinLineStyle),
	)
	for _, p := range c.pts {
		if p.T.Before(start) || p.T.After(end) {
			continue
		}
		m.Push(tslc.TimePoint{Time: p.T.Truncate(time.Second), Value: p.V})
	}
	if len(c.pts) == 0 {
		m.DrawXYAxisAndLabel()
	} else {
		m.DrawBraille()
	}
	out = append(out, paintCanvas(&m.Canvas, th)...)
	for len(out) < h {
		out = append(out, "")
	}
	return out
}

// The chart's cells carry these styles only as tags: ntcharts' own View
// renders every cell through lipgloss (milliseconds per chart), so we read
// the canvas and paint runs of cells with the theme's precomputed codes.
var (
	tagAxis  = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
	tagLabel = lipgloss.NewStyle().Foreground(lipgloss.Color("2"))
	tagLine  = lipgloss.NewStyle().Foreground(lipgloss.Color("3"))
)

func tagRole(st lipgloss.Style) themes.Role {
	switch st.GetForeground() {
	case tagAxis.GetForeground():
		return themes.Border
	case tagLabel.GetForeground():
		return themes.Dim
	case tagLine.GetForeground():
		return themes.Spark
	}
	return themes.Text
}

func paintCanvas(c *canvas.Model, th *themes.Theme) []string {
	out := make([]string, 0, c.Height())
	var run []rune
	for y := 0; y < c.Height(); y++ {
		var b strings.Builder
		role := themes.Text
		flush := func() {
			if len(run) > 0 {
				b.WriteString(th.Paint(role, string(run)))
				run = run[:0]
			}
		}
		for x := 0; x < c.Width(); x++ {
			cell := c.Cell(canvas.Point{X: x, Y: y})
			r, cr := cell.Rune, themes.Text
			if r == 0 {
				r = ' '
			} else {
				cr = tagRole(cell.Style)
			}
			if cr != role && r != ' ' {
				flush()
				role = cr
			}
			run = append(run, r)
		}
		flush()
		out = append(out, strings.TrimRight(b.String(), " "))
	}
	return out
}

// sparkRow is the compact form of a chart on small terminals: one line
// with its title, a sparkline over the window and the current value.
func sparkRow(c chartSpec, end time.Time, window time.Duration, w int, th *themes.Theme) string {
	maxv := 1.0 // fractions: 0..1 fixed
	if !c.percent {
		maxv = countScale(c.pts)
	}
	const titleW = 8
	const nowW, peakW = 9, 15
	sw := w - titleW - nowW - peakW - 5
	if sw < 4 {
		return line{{" " + fit(c.short, titleW, false), themes.Title}, {" " + c.now, themes.Text}}.render(th, w)
	}
	// The label is the peak over the window and, when the floor set the
	// scale instead, the scale too: "max 1 (scale 4)" says why one request
	// draws a low bar.
	var peak string
	switch m := seriesMax(c.pts); {
	case c.percent:
		peak = "0–100%"
	case len(c.pts) == 0:
		peak = "no data"
	case m < maxv:
		peak = "max " + numf(m) + " (scale " + numf(maxv) + ")"
	default:
		peak = "max " + numf(m)
	}
	return line{
		{" " + fit(c.short, titleW, false) + " ", themes.Title},
		{sparkline(c.pts, end, window, sw, maxv), themes.Spark},
		{" " + fit(c.now, nowW, true), themes.Text},
		{" " + fit(peak, peakW, false), themes.Dim},
	}.render(th, w)
}

// sparkFloor is the least top of a count sparkline's scale, so that one
// waiting request does not draw a full bar.
const sparkFloor = 4

// countScale is the top of a count sparkline's scale: the series' peak,
// at least sparkFloor.
func countScale(pts []pool.Point) float64 {
	return math.Max(sparkFloor, seriesMax(pts))
}
