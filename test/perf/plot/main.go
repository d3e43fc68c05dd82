// Command plot draws `make bench`'s figures (test/perf -out JSON): one EndpointSlice change, API
// write -> flows in OVS (p50, p99) and the agent's RSS against cluster size, with kube-proxy
// (nftables) beside them when it was measured. A nested module, so that the plotting library's
// pins stay out of the agent's go.mod.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

type latency struct {
	N            int
	P50ms, P99ms float64
}
type usage struct{ RSSMB float64 }

type result struct {
	Services        int
	AgentAtReady    usage
	AgentAfter      usage
	Change          latency
	KubeProxyAtSync usage
	KubeProxyChange latency
	DualStack       *struct{ AtReady usage } // the same size dual-stack (issue 22), cold start only
}

func main() {
	in := flag.String("in", "results.json", "test/perf -out file")
	out := flag.String("out", "performance.png", "PNG to write")
	flag.Parse()
	if err := draw2(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

var (
	blue   = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	orange = color.RGBA{R: 255, G: 127, B: 14, A: 255}
)

func line(p *plot.Plot, name string, c color.Color, dashed bool, xys plotter.XYs) error {
	if len(xys) == 0 {
		return nil
	}
	l, pts, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.Color, pts.Color = c, c
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l, pts)
	p.Legend.Add(name, l, pts)
	return nil
}

func draw2(in, out string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	// test/perf writes {"Datapath": ..., "Sizes": [...]}; earlier runs wrote the sizes alone.
	var all struct{ Sizes []result }
	var rs []result
	if err := json.Unmarshal(b, &all); err == nil {
		rs = all.Sizes
	} else if err := json.Unmarshal(b, &rs); err != nil {
		return err
	}
	if len(rs) == 0 {
		fmt.Fprintf(os.Stderr, "plot: %s has no cluster sizes (-only=datapath?): nothing drawn\n", in)
		return nil
	}
	var ap50, ap99, kp50, kp99, arss, drss, krss plotter.XYs
	for _, r := range rs {
		x := float64(r.Services)
		if r.Change.N > 0 {
			ap50 = append(ap50, plotter.XY{X: x, Y: r.Change.P50ms})
			ap99 = append(ap99, plotter.XY{X: x, Y: r.Change.P99ms})
		}
		if r.KubeProxyChange.N > 0 {
			kp50 = append(kp50, plotter.XY{X: x, Y: r.KubeProxyChange.P50ms})
			kp99 = append(kp99, plotter.XY{X: x, Y: r.KubeProxyChange.P99ms})
		}
		arss = append(arss, plotter.XY{X: x, Y: max(r.AgentAtReady.RSSMB, r.AgentAfter.RSSMB)})
		if r.DualStack != nil {
			drss = append(drss, plotter.XY{X: x, Y: r.DualStack.AtReady.RSSMB})
		}
		if r.KubeProxyAtSync.RSSMB > 0 {
			krss = append(krss, plotter.XY{X: x, Y: r.KubeProxyAtSync.RSSMB})
		}
	}
	lat := plot.New()
	lat.Title.Text = "One EndpointSlice change: API write -> dataplane"
	lat.X.Label.Text = "opted-in Services (x10 endpoints, 50 nodes)"
	lat.Y.Label.Text = "ms"
	lat.X.Scale, lat.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
	lat.Legend.Top, lat.Legend.Left = true, true
	lat.Y.Min = 0
	for _, s := range []struct {
		name   string
		c      color.Color
		dashed bool
		xys    plotter.XYs
	}{
		{"srcip-agent p50", blue, false, ap50}, {"srcip-agent p99", blue, true, ap99},
		{"kube-proxy nftables p50", orange, false, kp50}, {"kube-proxy nftables p99", orange, true, kp99},
	} {
		if err := line(lat, s.name, s.c, s.dashed, s.xys); err != nil {
			return err
		}
	}
	mem := plot.New()
	mem.Title.Text = "Resident memory after the first sync"
	mem.X.Label.Text = "opted-in Services (x10 endpoints, 50 nodes)"
	mem.Y.Label.Text = "MB"
	mem.X.Scale, mem.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
	mem.Legend.Top, mem.Legend.Left = true, true
	mem.Y.Min = 0
	if err := line(mem, "srcip-agent", blue, false, arss); err != nil {
		return err
	}
	if err := line(mem, "srcip-agent, dual-stack cluster", blue, true, drss); err != nil {
		return err
	}
	if err := line(mem, "kube-proxy nftables", orange, false, krss); err != nil {
		return err
	}

	img := vgimg.New(vg.Points(900), vg.Points(380))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(20), PadY: vg.Points(10), PadTop: vg.Points(5), PadBottom: vg.Points(5), PadLeft: vg.Points(5), PadRight: vg.Points(10)}
	canvases := plot.Align([][]*plot.Plot{{lat, mem}}, tiles, dc)
	lat.Draw(canvases[0][0])
	mem.Draw(canvases[0][1])
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	png := vgimg.PngCanvas{Canvas: img}
	if _, err := png.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
