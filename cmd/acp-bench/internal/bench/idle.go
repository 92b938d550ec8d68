package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/iac-code/iac-code/cmd/acp-bench/internal/acpclient"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/proc"
	"github.com/iac-code/iac-code/cmd/acp-bench/internal/stats"
)

// IdleFootprintParams sizes idle.
type IdleFootprintParams struct {
	// Runs is the number of server starts; the medians are reported.
	Runs int
	// Cold drops the binary from the page cache before each start (see
	// StartupParams.Cold).
	Cold bool
	// Settle is how long the server idles before each reading.
	Settle time.Duration
}

// idlePhases are the two readings of a run: started and left alone, then
// after an initialize request was answered.
var idlePhases = []string{"before request", "after initialize"}

// IdleFootprint measures an idle stdio server's memory before its first
// request and after initialize: RssAnon, RssFile and PSS of the server and
// of each other process of its tree (a watchdog when one runs), and the
// tree's PSS beside its summed RSS (pages of the binary two processes map
// count twice in the sum, once in PSS).
func IdleFootprint(ctx context.Context, o *Options, p IdleFootprintParams) (*Result, error) {
	params := "runs=" + strconv.Itoa(p.Runs) + " settle=" + p.Settle.String()
	if p.Cold {
		params += " cold"
	}
	r := newResult("idle", params, map[string]any{"runs": p.Runs, "cold": p.Cold, "settle": p.Settle.String()})
	fake, stopFake := startFake(0)
	defer stopFake()
	prog := o.progress("idle", int64(p.Runs), "runs")
	var runs [][2][]proc.Mem
	var pages [][2][]proc.Section
	errs := map[string]int64{}
	for range p.Runs {
		if p.Cold {
			if err := dropFromPageCache(o.Bin); err != nil {
				return nil, fmt.Errorf("--cold: %w", err)
			}
		}
		m, secs, err := idleOnce(ctx, o, fake.URL(), p.Settle)
		prog.add(1)
		if err != nil {
			errs[err.Error()]++
			continue
		}
		runs = append(runs, m)
		pages = append(pages, secs)
	}
	prog.finish()
	for i, phase := range idlePhases {
		count := func(f func([]proc.Mem) float64) float64 {
			v := make([]float64, 0, len(runs))
			for _, run := range runs {
				v = append(v, f(run[i]))
			}
			return stats.Exact(v, 50)
		}
		median := func(f func([]proc.Mem) int64) float64 {
			return count(func(ms []proc.Mem) float64 { return mib(f(ms)) })
		}
		if len(runs) == 0 {
			break
		}
		server := func(f func(proc.Mem) int64) func([]proc.Mem) int64 {
			return func(ms []proc.Mem) int64 { return f(ms[0]) }
		}
		others := func(f func(proc.Mem) int64) func([]proc.Mem) int64 {
			return func(ms []proc.Mem) (n int64) {
				for _, m := range ms[1:] {
					n += f(m)
				}
				return n
			}
		}
		tree := func(f func(proc.Mem) int64) func([]proc.Mem) int64 {
			return func(ms []proc.Mem) (n int64) {
				for _, m := range ms {
					n += f(m)
				}
				return n
			}
		}
		file := func(m proc.Mem) int64 { return m.FileRSS + m.ShmemRSS }
		anon := func(m proc.Mem) int64 { return m.AnonRSS }
		pss := func(m proc.Mem) int64 { return m.PSS }
		anonPSS := func(m proc.Mem) int64 { return m.AnonPSS }
		rss := func(m proc.Mem) int64 { return m.RSS }
		f := median(server(file))
		met := r.add(phase+": server RssFile", f, "MiB")
		met.Note = "the binary's pages in the server's page tables (RssFile + RssShmem, for a binary on tmpfs); depends on how the page cache holds the file: see docs/performance.md, Idle footprint"
		if i == 0 {
			met.target("≤ 30 MiB", f <= 30)
		}
		r.add(phase+": server RssAnon", median(server(anon)), "MiB")
		r.add(phase+": server PSS", median(server(pss)), "MiB")
		r.add(phase+": other processes", count(func(ms []proc.Mem) float64 { return float64(len(ms) - 1) }), "").Note =
			"processes below the server (the watchdog runs only once a tool process group was started)"
		r.add(phase+": other processes RSS", median(others(rss)), "MiB")
		r.add(phase+": other processes PSS", median(others(pss)), "MiB")
		r.add(phase+": tree PSS", median(tree(pss)), "MiB").Note = "PSS summed over the server's process tree: pages several processes map count once"
		r.add(phase+": tree anonymous PSS", median(tree(anonPSS)), "MiB")
		r.add(phase+": tree RSS (summed)", median(tree(rss)), "MiB").Note = "RSS summed over the tree: pages several processes map count once per process"
		// Which of the binary's sections those pages are in (the first
		// run's list names them; pagemap unreadable: none).
		for k, sec := range pages[0][i] {
			if sec.Size < 64<<10 {
				continue
			}
			v := make([]float64, 0, len(pages))
			for _, run := range pages {
				if k < len(run[i]) {
					v = append(v, mib(run[i][k].Present))
				}
			}
			r.add(phase+": server's "+sec.Name+" pages", stats.Exact(v, 50), "MiB").Note =
				fmt.Sprintf("of %.2f MiB: present in the server's page tables (pagemap); data pages it wrote are RssAnon", mib(sec.Size))
		}
	}
	r.finish(nil, errs)
	return r, nil
}

// idleOnce starts a server over stdio, reads its tree's memory and the
// binary's pages it maps after settle, sends initialize, reads them again
// after settle, and stops it.
func idleOnce(ctx context.Context, o *Options, fakeURL string, settle time.Duration) (m [2][]proc.Mem, secs [2][]proc.Section, err error) {
	s, err := startStdioServer(o, fakeURL)
	if err != nil {
		return m, secs, err
	}
	defer s.stop()
	for i := range idlePhases {
		if i == 1 {
			if err := s.initialize(); err != nil {
				return m, secs, err
			}
		}
		select {
		case <-ctx.Done():
			return m, secs, ctx.Err()
		case <-time.After(settle):
		}
		if m[i], err = proc.ReadTreeMem(s.cmd.Process.Pid); err != nil {
			return m, secs, err
		}
		secs[i], _ = proc.ExecutablePages(s.cmd.Process.Pid)
	}
	return m, secs, nil
}

// stdioServer is a server started over stdio for one run of startup or
// idle.
type stdioServer struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *os.File // the read end of its stdout
	stderr  *tailBuffer
	started time.Time // just before exec
}

func startStdioServer(o *Options, fakeURL string) (*stdioServer, error) {
	cmd := exec.Command(o.Bin, "acp", "--transport", "stdio")
	cmd.Env = o.serverEnv(fakeURL)
	cmd.Dir = o.Workdir
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s := &stdioServer{cmd: cmd, in: in, out: rd, stderr: &tailBuffer{max: 16 << 10}}
	cmd.Stdout, cmd.Stderr = wr, s.stderr
	s.started = time.Now()
	err = cmd.Start()
	wr.Close()
	if err != nil {
		rd.Close()
		return nil, err
	}
	return s, nil
}

// initialize sends an initialize request and reads its answer.
func (s *stdioServer) initialize() error {
	if _, err := s.in.Write(append(acpclient.Initialize(1), '\n')); err != nil {
		return err
	}
	acpclient.SetReadDeadline(s.out, time.Now().Add(10*time.Second))
	m, err := acpclient.NewStdio(s.in, s.out).ReadUntil(1, nil)
	if err != nil {
		return fmt.Errorf("initialize: %w; stderr: %s", err, s.stderr)
	}
	if m.Err != nil { // a typed nil would be a non-nil error
		return m.Err
	}
	return nil
}

// stop closes the server's stdin and waits for it to exit, killing it
// after 10 s.
func (s *stdioServer) stop() {
	_ = s.in.Close()
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.out.Close()
}
