package simulator

import (
	"archive/zip"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
)

// ShortChild is the short-lived child a Streaming mapper forks at its k-th
// turn (bash, with k set): a pipeline into sort, awk, sh -c true, or a
// background sleep, in turn (internal/taskstats' TestRecordsShortOfWait4
// measures how far their exit records fall short of wait4).
const ShortChild = `case $(( k % 4 )) in
  0) printf '3\n1\n2\n' | sort > /dev/null ;;
  1) awk 'BEGIN { s = 0; for (i = 0; i < 1000; i++) s += i; exit 0 }' ;;
  2) sh -c 'true' ;;
  3) ( sleep 0.02 ) & ;;
esac`

// The streaming mapper: bash that burns CPU in the shell itself (builtins
// only, reading its own /proc/$$/stat) and forks short-lived children (a
// subshell pipeline into sort, awk, sh -c true, a background sleep) which it
// waits for. Its parameters come from the environment PipeMapRed builds
// from the job configuration.
const mapperScript = `#!/bin/bash
# Hadoop Streaming mapper written by the taskscope simulator.
cpu_ms=${taskscope_sim_attempt_stream_cpu_ms:-100}
kids=${taskscope_sim_attempt_stream_children:-0}
records=0
while IFS= read -r line; do
  records=$((records + 1))
done

burn() {
  local target=$(( $1 / 10 )) f i start
  read -r -a f < /proc/$$/stat
  start=$(( f[13] + f[14] ))
  while :; do
    for ((i = 0; i < 3000; i++)); do :; done
    read -r -a f < /proc/$$/stat
    (( f[13] + f[14] - start >= target )) && break
  done
}

slices=$(( kids + 1 ))
for ((k = 0; k < slices; k++)); do
  burn $(( cpu_ms / slices ))
  if (( k < kids )); then
    ` + ShortChild + `
  fi
done
wait
printf '%s\t%d\n' "${mapreduce_task_attempt_id:-$mapred_task_id}" "$records"
`

// The streaming reducer: python3, same idea.
const reducerScript = `#!/usr/bin/env python3
# Hadoop Streaming reducer written by the taskscope simulator.
import os, subprocess, sys, time

cpu_ms = int(os.environ.get("taskscope_sim_attempt_stream_cpu_ms", "100"))
kids = int(os.environ.get("taskscope_sim_attempt_stream_children", "0"))
records = sum(1 for _ in sys.stdin)

def burn(ms):
    end = time.process_time() + ms / 1000.0
    x = 1
    while time.process_time() < end:
        for i in range(2000):
            x = (x * 1103515245 + 12345) & 0x7fffffff

cmds = [["sort"], ["awk", "BEGIN { exit 0 }"], ["sh", "-c", "true"], ["cat"]]
slices = kids + 1
for k in range(slices):
    burn(cpu_ms / slices)
    if k < kids:
        subprocess.run(cmds[k % len(cmds)], input=b"b\na\n", stdout=subprocess.DEVNULL, check=False)
print("%s\t%d" % (os.environ.get("mapreduce_task_attempt_id", os.environ.get("mapred_task_id", "")), records))
`

// pyspark/daemon.py: like Spark's, it listens on a port it prints on
// stdout, forks a worker per connection, reaps them, and exits when its
// stdin closes.
const pysparkDaemon = `# pyspark.daemon stand-in written by the taskscope simulator.
import os, select, signal, socket, sys, time

def worker(conn):
    f = conn.makefile("rwb")
    ms = int(f.readline().strip() or b"0")
    end = time.process_time() + ms / 1000.0
    x = 1
    while time.process_time() < end:
        for i in range(2000):
            x = (x * 1103515245 + 12345) & 0x7fffffff
    f.write(b"done\n")
    f.flush()

def reap(children):
    while children:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)

def manager():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(32)
    sys.stdout.write("%d\n" % s.getsockname()[1])
    sys.stdout.flush()
    children = set()
    stdin = sys.stdin.buffer
    while True:
        r, _, _ = select.select([s, stdin], [], [], 0.2)
        reap(children)
        if stdin in r and not os.read(stdin.fileno(), 4096):
            break
        if s in r:
            conn, _ = s.accept()
            pid = os.fork()
            if pid == 0:
                s.close()
                try:
                    worker(conn)
                finally:
                    os._exit(0)
            children.add(pid)
            conn.close()
    for pid in list(children):
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass

if __name__ == "__main__":
    manager()
`

// pysparkZip is the pyspark.zip a PySpark executor has on its PYTHONPATH.
func pysparkZip() []byte {
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	for _, f := range []struct{ name, body string }{
		{"pyspark/__init__.py", "# pyspark stand-in written by the taskscope simulator.\n"},
		{"pyspark/daemon.py", pysparkDaemon},
	} {
		fw, err := w.Create(f.name)
		if err != nil {
			panic(err)
		}
		fw.Write([]byte(f.body))
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// findPython returns a python3 interpreter, preferring the system's over
// wrappers such as pyenv shims (which fork a crowd of helpers).
func findPython() string {
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath("python3"); err == nil {
		if out, err := exec.Command(p, "-c", "import sys; print(sys.executable)").Output(); err == nil {
			if s := string(bytes.TrimSpace(out)); filepath.IsAbs(s) {
				return s
			}
		}
		return p
	}
	return ""
}
