package inbox

import (
	"fmt"
	"strings"
	"time"
)

// point is the value of a series after one record.
type point struct {
	Seq   uint64
	At    time.Time
	Value int64
	X, Y  float64
}

// chart is a step chart drawn on the server as SVG: the x axis is the order
// of the records (seq), the y axis the running total, with a limit line (the
// budget, the scar limit). Every number is in the DOM as text and as data
// attributes, so that a test or a screen reader reads what is drawn (D124: the charts).
type chart struct {
	ID, Title, LimitLabel string
	Points                []point
	Final, Limit, Top     int64
	Path                  string
	LimitY                float64
	Ticks                 []tick
	First, Last           time.Time
}

type tick struct {
	Y     float64
	Label string
}

// Drawing area inside the viewBox (0 0 chartW chartH).
const (
	chartW, chartH         = 640.0, 220.0
	padL, padR, padT, padB = 44.0, 16.0, 14.0, 30.0
)

// ViewBox is the SVG viewBox.
func (c chart) ViewBox() string { return fmt.Sprintf("0 0 %g %g", chartW, chartH) }

// Geometry for the template.
func (c chart) Left() float64   { return padL }
func (c chart) Right() float64  { return chartW - padR }
func (c chart) Bottom() float64 { return chartH - padB }
func (c chart) TopY() float64   { return padT }
func (c chart) LabelY() float64 { return chartH - 8 }

func newChart(id, title string, pts []point, limit int64, limitLabel string) chart {
	c := chart{ID: id, Title: title, Points: pts, Limit: limit, LimitLabel: limitLabel}
	top := limit
	for _, p := range pts {
		top = max(top, p.Value)
	}
	if top <= 0 {
		top = 1
	}
	c.Top = top
	pts = thin(pts, maxPoints)
	c.Points = pts
	n := len(pts)
	var first, span float64
	if n > 1 {
		first, span = float64(pts[0].Seq), float64(pts[n-1].Seq-pts[0].Seq)
	}
	x := func(seq uint64) float64 {
		if span == 0 {
			return padL
		}
		return padL + (float64(seq)-first)*(chartW-padL-padR)/span
	}
	y := func(v int64) float64 { return chartH - padB - float64(v)*(chartH-padT-padB)/float64(top) }
	var path strings.Builder
	for i := range pts {
		pts[i].X, pts[i].Y = x(pts[i].Seq), y(pts[i].Value)
		if i == 0 {
			fmt.Fprintf(&path, "M%.1f %.1f", pts[i].X, pts[i].Y)
		} else { // a step: the total changes at the record
			fmt.Fprintf(&path, " H%.1f V%.1f", pts[i].X, pts[i].Y)
		}
	}
	c.Path = path.String()
	if n > 0 {
		c.Final = pts[n-1].Value
		c.First, c.Last = pts[0].At, pts[n-1].At
	}
	c.LimitY = y(limit)
	for _, v := range []int64{0, top / 2, top} {
		c.Ticks = append(c.Ticks, tick{Y: y(v), Label: fmt.Sprint(v)})
	}
	return c
}

// maxPoints is the most points a chart draws: a long log keeps its first
// point, its last, and the records where the total changed, evenly thinned
// if there are still too many (D129: long logs).
const maxPoints = 500

func thin(pts []point, most int) []point {
	if len(pts) <= most {
		return pts
	}
	kept := []point{pts[0]}
	for i := 1; i < len(pts)-1; i++ {
		if pts[i].Value != pts[i-1].Value {
			kept = append(kept, pts[i])
		}
	}
	kept = append(kept, pts[len(pts)-1])
	if len(kept) <= most {
		return kept
	}
	out := make([]point, 0, most)
	step := float64(len(kept)-1) / float64(most-1)
	for i := range most - 1 {
		out = append(out, kept[int(float64(i)*step)])
	}
	return append(out, kept[len(kept)-1])
}
