package report

import (
	"bytes"
	"fmt"
	"html/template"
	"os"
	"strconv"
	"time"

	"github.com/go-analyze/charts"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/bench"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/stats"
)

// svg renders a chart with the painter function into inline SVG.
func svg(width, height int, draw func(p *charts.Painter) error) (template.HTML, error) {
	p := charts.NewPainter(charts.PainterOptions{OutputFormat: charts.ChartOutputSVG, Width: width, Height: height})
	if err := draw(p); err != nil {
		return "", err
	}
	b, err := p.Bytes()
	if err != nil {
		return "", err
	}
	// The SVG comes from the chart library, not from user input.
	return template.HTML(b), nil //nolint:gosec
}

// durationLabel names a bin edge in nanoseconds.
func durationLabel(ns int64) string {
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'g', 3, 64) + "s"
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e6, 'g', 3, 64) + "ms"
	default:
		return strconv.FormatFloat(float64(d)/1e3, 'g', 3, 64) + "µs"
	}
}

// trimBins drops empty bins at both ends.
func trimBins(bins []stats.Bin) []stats.Bin {
	lo, hi := 0, len(bins)
	for lo < hi && bins[lo].Count == 0 {
		lo++
	}
	for hi > lo && bins[hi-1].Count == 0 {
		hi--
	}
	return bins[lo:hi]
}

func histogramChart(r *bench.Result) (template.HTML, error) {
	bins := trimBins(r.LatencyBins)
	if len(bins) == 0 {
		return "", nil
	}
	values := make([]float64, len(bins))
	labels := make([]string, len(bins))
	for i, b := range bins {
		values[i] = float64(b.Count)
		if b.Hi < 0 {
			labels[i] = "≥" + durationLabel(b.Lo)
		} else {
			labels[i] = "<" + durationLabel(b.Hi)
		}
	}
	opt := charts.NewBarChartOptionWithData([][]float64{values})
	opt.Title.Text = r.LatencyLabel + " (count per bin)"
	opt.CategoryAxis.Labels = labels
	opt.Legend.Show = charts.Ptr(false)
	return svg(760, 340, func(p *charts.Painter) error { return p.BarChart(opt) })
}

func lineChart(title, series string, xs []string, ys []float64) (template.HTML, error) {
	if len(ys) < 2 {
		return "", nil
	}
	opt := charts.NewLineChartOptionWithData([][]float64{ys})
	opt.Title.Text = title
	opt.XAxis.Labels = xs
	opt.XAxis.LabelCount = min(len(xs), 12)
	opt.Legend.SeriesNames = []string{series}
	opt.Legend.Show = charts.Ptr(false)
	opt.Symbol.Shape = charts.SymbolNone
	opt.LineStrokeWidth = 1.5
	return svg(760, 300, func(p *charts.Painter) error { return p.LineChart(opt) })
}

func rateChart(r *bench.Result) (template.HTML, error) {
	if len(r.EventsPerSecond) < 2 {
		return "", nil
	}
	xs := make([]string, len(r.EventsPerSecond))
	ys := make([]float64, len(r.EventsPerSecond))
	for i, v := range r.EventsPerSecond {
		xs[i] = strconv.Itoa(i) + "s"
		ys[i] = float64(v)
	}
	return lineChart("events/s at the clients", "events/s", xs, ys)
}

func rssChart(r *bench.Result) (template.HTML, error) {
	if len(r.Server) < 2 {
		return "", nil
	}
	xs := make([]string, len(r.Server))
	ys := make([]float64, len(r.Server))
	for i, s := range r.Server {
		xs[i] = strconv.FormatFloat(s.T.Seconds(), 'f', 0, 64) + "s"
		ys[i] = float64(s.RSS) / (1 << 20)
	}
	return lineChart("server RSS (MiB)", "RSS", xs, ys)
}

type htmlResult struct {
	*bench.Result
	Rows   []htmlRow
	Charts []template.HTML
}

type htmlRow struct {
	Name, Value, Unit, Target, Status, Note string
}

var page = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>acp-bench report</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:900px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1em}td,th{padding:.2em .8em;border-bottom:1px solid #ddd;text-align:left}
td.v{text-align:right;font-variant-numeric:tabular-nums}.met{color:#070}.MISSED,.FAILED{color:#b00;font-weight:bold}.OK{color:#070}
code{background:#f4f4f4;padding:.1em .3em}section{margin-bottom:3em}svg{max-width:100%;height:auto}
</style></head><body>
<h1>acp-bench report</h1>
<p><code>{{.Run.Command}}</code><br>server <code>{{.Run.Server}}</code>, {{.Run.CPUs}} CPUs {{.Run.CPUModel}}, {{.Run.MemTotal}}, {{.Run.GoVersion}}, Linux {{.Run.Kernel}}, {{.Run.Started.Format "2006-01-02 15:04:05 MST"}}</p>
{{range .Results}}<section>
<h2>{{.Workload}} {{.Variant}} <span class="{{if .OK}}OK{{else}}FAILED{{end}}">{{if .OK}}OK{{else}}FAILED{{end}}</span></h2>
<table><tr><th>figure</th><th>value</th><th>unit</th><th>target</th><th></th><th>note</th></tr>
{{range .Rows}}<tr><td>{{.Name}}</td><td class="v">{{.Value}}</td><td>{{.Unit}}</td><td>{{.Target}}</td><td class="{{.Status}}">{{.Status}}</td><td>{{.Note}}</td></tr>
{{end}}</table>
{{with .Latency}}<p>{{$.Label .}}</p>{{end}}
{{with .Check}}<p>sequence check: {{.}}</p>{{end}}
{{range .Failures}}<p class="FAILED">{{.}}</p>{{end}}
{{range .Notes}}<p>note: {{.}}</p>{{end}}
{{range .Charts}}<div>{{.}}</div>{{end}}
</section>{{end}}
</body></html>
`))

type pageData struct {
	Run     Run
	Results []htmlResult
}

// Label formats a latency summary line.
func (pageData) Label(s *stats.Summary) string {
	return fmt.Sprintf("p50 %s ms · p90 %s ms · p99 %s ms · p99.9 %s ms · max %s ms (%d samples)",
		FormatValue(s.P50MS), FormatValue(s.P90MS), FormatValue(s.P99MS), FormatValue(s.P999MS), FormatValue(s.MaxMS), s.Count)
}

// WriteHTML writes the self-contained report.
func WriteHTML(path string, run Run, results []*bench.Result) error {
	data := pageData{Run: run}
	for _, r := range results {
		hr := htmlResult{Result: r}
		for _, m := range r.Metrics {
			v := FormatValue(m.Value)
			if m.NA {
				v = "n/a"
			}
			hr.Rows = append(hr.Rows, htmlRow{m.Name, v, m.Unit, m.Target, status(m), m.Note})
		}
		for _, f := range []func(*bench.Result) (template.HTML, error){histogramChart, rateChart, rssChart} {
			c, err := f(r)
			if err != nil {
				return fmt.Errorf("%s chart: %w", r.Workload, err)
			}
			if c != "" {
				hr.Charts = append(hr.Charts, c)
			}
		}
		data.Results = append(data.Results, hr)
	}
	var buf bytes.Buffer
	if err := page.Execute(&buf, data); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
