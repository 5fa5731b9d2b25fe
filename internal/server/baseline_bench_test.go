package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// victoriaMetrics is the baseline of the ingest target (issue 4 puts it
// at 2.5 times what VictoriaMetrics takes on the same machine): the
// batches of the run, written as Prometheus remote write bodies, as
// vmagent sends them (loadgen.PrepareRemoteWriteFile: every process's and
// attempt's metric a series labelled with its host, process, attempt and
// job), sent the same way (one connection per node, each node's batches in order) to
// a VictoriaMetrics started on loopback with its data in a temporary
// directory. The time runs until the last body is answered and
// /internal/force_flush has returned (VictoriaMetrics answers an import
// once it is in memory, and makes it durable within a second or so;
// taskscope answers once it is durable). It reports process samples per
// second, as the other modes do, the CPU of VictoriaMetrics and of the
// sender per sample, and VictoriaMetrics' bytes per sample on disk after
// a clean shutdown. Then it checks that every sample is stored: the count
// of the CPU metric's points over the run.
//
// It needs Debian's victoria-metrics package (make bench-deps).
func victoriaMetrics(b *testing.B, cfg loadgen.Config) {
	bin, err := exec.LookPath("victoria-metrics")
	if err != nil {
		b.Fatal("victoria-metrics is not installed (make bench-deps installs Debian's package): ", err)
	}
	vm, err := loadgen.PrepareRemoteWriteFile(cfg, filepath.Join(b.TempDir(), "remote-write"))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("prepared %d remote write bodies, %.1f MB", vm.Batches, float64(vm.Bytes)/1e6)
	dir := b.TempDir()
	addr := testsrv.FreeAddr(b)
	cmd := exec.Command(bin, "-storageDataPath="+dir, "-httpListenAddr="+addr, "-retentionPeriod=100y",
		"-loggerLevel=ERROR", "-maxInsertRequestSize=256MB")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cmd.Process.Signal(syscall.SIGINT)
			cmd.Wait()
		}
	}
	defer stop()
	base := "http://" + addr
	testsrv.WaitUntil(b, "VictoriaMetrics to start", 10*time.Second, func() bool { return get(base+"/health", nil) == nil })
	cfg.URL, cfg.Endpoint = base, loadgen.RemoteWrite
	cfg.Client = &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	vmCPU0, cpu0 := processCPU(b, cmd.Process.Pid), cpuTime()
	b.ResetTimer()
	t0 := time.Now()
	res, err := loadgen.SendFile(context.Background(), cfg, vm.Path)
	if err == nil {
		err = get(base+"/internal/force_flush", nil)
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	vmCPU, cpu := processCPU(b, cmd.Process.Pid)-vmCPU0, cpuTime()-cpu0
	if err != nil {
		b.Fatal(err)
	}
	if res.Rejected > 0 {
		b.Fatalf("%d bodies rejected", res.Rejected)
	}
	// Every process sample has its CPU time: count the stored points.
	lastMs := cfg.Start.Add(cfg.Duration + time.Minute).UnixMilli()
	q := url.Values{"query": {fmt.Sprintf(`sum(count_over_time(%s[%dm]))`, wire.CPUUserMs, int(cfg.Duration.Minutes())+2)},
		"time": {strconv.FormatFloat(float64(lastMs)/1000, 'f', 3, 64)}}
	var answer struct {
		Data struct {
			Result []struct {
				Value []any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := get(base+"/api/v1/query?"+q.Encode(), &answer); err != nil {
		b.Fatal(err)
	}
	stored := int64(-1)
	if r := answer.Data.Result; len(r) == 1 && len(r[0].Value) == 2 {
		s, _ := r[0].Value[1].(string)
		stored, _ = strconv.ParseInt(s, 10, 64)
	}
	if stored != res.Samples {
		b.Fatalf("VictoriaMetrics stored %d CPU points of %d samples sent (%+v)", stored, res.Samples, answer)
	}
	stop()
	var bytes int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				bytes += fi.Size()
			}
		}
		return nil
	})
	rate := float64(res.Samples) / elapsed.Seconds()
	b.ReportMetric(rate, "samples/s")
	b.ReportMetric(float64((vmCPU+cpu).Nanoseconds())/float64(res.Samples), "cpu-ns/sample")
	b.Logf("%d samples in %s: %.0f samples/s; CPU of VictoriaMetrics %.0f%% of 2 cores, of the sender %.0f%%; %d sends retried; %.2f B/sample on disk after shutdown",
		res.Samples, elapsed.Round(time.Millisecond), rate, 100*vmCPU.Seconds()/elapsed.Seconds()/2,
		100*cpu.Seconds()/elapsed.Seconds()/2, res.Retries, float64(bytes)/float64(res.Samples))
}

// processCPU is the CPU time pid has used.
func processCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	var st procfs.Stat
	if err := procfs.ParseStat(data, &st); err != nil {
		b.Fatal(err)
	}
	return time.Duration(st.UTime+st.STime) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// get GETs u and decodes its JSON answer into v (nil: any 2xx).
func get(u string, v any) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(body, v)
}
