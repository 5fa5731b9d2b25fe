package hadoop

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

func parseConfFile(t *testing.T, name string) (Conf, error) {
	t.Helper()
	f, err := os.Open("testdata/conf/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return ParseConf(f)
}

func TestParseConfHadoop2JobXML(t *testing.T) {
	c, err := parseConfFile(t, "job-h2.xml")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"mapreduce.job.name":        "word count & friends",
		"mapreduce.job.reduces":     "3", // trimmed
		"mapreduce.job.cache.files": "hdfs://nn:8020/user/alice/mapper.py#mapper.py",
		"empty.value":               "",
	} {
		if got, ok := c[name]; !ok || got != want {
			t.Errorf("%s = %q (set %v), want %q", name, got, ok, want)
		}
	}
	tests := []struct {
		taskType string
		want     JobConf
	}{
		{"map", JobConf{JobName: "word count & friends", User: "alice", Queue: "etl", MemoryMB: 1024,
			JavaOpts: "-Djava.net.preferIPv4Stack=true -Xmx512m -Xmx820m", XmxBytes: 820 << 20, Streaming: true, Reduces: 3, Maps: 12}},
		{"reduce", JobConf{JobName: "word count & friends", User: "alice", Queue: "etl", MemoryMB: 2048,
			JavaOpts: "-Xmx1638m", XmxBytes: 1638 << 20, Streaming: true, Reduces: 3, Maps: 12}},
		{"am", JobConf{JobName: "word count & friends", User: "alice", Queue: "etl", MemoryMB: 1536,
			JavaOpts: "-Xmx1024m", XmxBytes: 1 << 30, Streaming: true, Reduces: 3, Maps: 12}},
		{"executor", JobConf{JobName: "word count & friends", User: "alice", Queue: "etl", Streaming: true, Reduces: 3, Maps: 12}},
	}
	for _, tc := range tests {
		if got := c.JobConfFor(tc.taskType); got != tc.want {
			t.Errorf("JobConfFor(%q):\n got %+v\nwant %+v", tc.taskType, got, tc.want)
		}
	}
}

func TestParseConfHadoop1Site(t *testing.T) {
	c, err := parseConfFile(t, "mapred-site-h1.xml")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"mapred.tasktracker.map.tasks.maximum":    "8",                                         // final: the later 16 is ignored
		"mapred.tasktracker.reduce.tasks.maximum": "6",                                         // not final: the later value wins
		"mapred.local.dir":                        "/data/1/mapred/local,/data/2/mapred/local", // attribute form, final
		"mapred.job.tracker":                      "jt.example.com:8021",
	} {
		if got := c[name]; got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if n, ok := c.Int("mapred.tasktracker.map.tasks.maximum"); !ok || n != 8 {
		t.Errorf("Int(map maximum) = %d, %v", n, ok)
	}
	want := JobConf{JobName: "nightly-etl", User: "bob", Queue: "batch", MemoryMB: 1536, JavaOpts: "-Xmx1g", XmxBytes: 1 << 30, Maps: 40, Reduces: 7}
	if got := c.JobConfFor("map"); got != want {
		t.Errorf("JobConfFor(map):\n got %+v\nwant %+v", got, want)
	}
	// The reduce side falls back to mapred.child.java.opts.
	want = JobConf{JobName: "nightly-etl", User: "bob", Queue: "batch", JavaOpts: "-Xmx200m -Djava.net.preferIPv4Stack=true", XmxBytes: 200 << 20, Maps: 40, Reduces: 7}
	if got := c.JobConfFor("reduce"); got != want {
		t.Errorf("JobConfFor(reduce):\n got %+v\nwant %+v", got, want)
	}
}

func TestParseConfErrors(t *testing.T) {
	for _, name := range []string{"truncated.xml", "mismatched.xml", "no-configuration.xml", "bad-entity.xml", "not-xml.properties"} {
		t.Run(name, func(t *testing.T) {
			_, err := parseConfFile(t, name)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), "cannot parse configuration") {
				t.Errorf("error %q does not say what failed", err)
			}
		})
	}
	for _, in := range []string{"", "<configuration>", "<configuration></configure>", "\x00"} {
		if _, err := ParseConf(strings.NewReader(in)); err == nil {
			t.Errorf("ParseConf(%q): no error", in)
		}
	}
	// A reader error is reported, wrapped.
	boom := errors.New("boom")
	if _, err := ParseConf(io.MultiReader(strings.NewReader("<configuration>"), errReader{boom})); !errors.Is(err, boom) {
		t.Errorf("reader error: got %v", err)
	}
	// A document larger than MaxConfBytes is cut, and so incomplete.
	big := "<configuration>" + strings.Repeat("<!-- padding -->", MaxConfBytes/16+1) + "</configuration>"
	if _, err := ParseConf(strings.NewReader(big)); err == nil {
		t.Error("a document over MaxConfBytes parsed")
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestConfFirstInt(t *testing.T) {
	c := Conf{"a": "", "b": "x", "c": " 12 ", "d": "-3", "e": "1.5"}
	if got := c.First("missing", "a", "b", "c"); got != "x" {
		t.Errorf("First = %q, want x (empty values are skipped)", got)
	}
	if got := c.First("missing"); got != "" {
		t.Errorf("First(missing) = %q", got)
	}
	tests := []struct {
		names []string
		want  int64
		ok    bool
	}{
		{[]string{"c"}, 12, true},
		{[]string{"b", "e", "d"}, -3, true}, // the first that is an integer
		{[]string{"b", "e"}, 0, false},
		{nil, 0, false},
	}
	for _, tc := range tests {
		if got, ok := c.Int(tc.names...); got != tc.want || ok != tc.ok {
			t.Errorf("Int(%q) = %d, %v; want %d, %v", tc.names, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseJavaSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"512m", 512 << 20, true},
		{"512M", 512 << 20, true},
		{"2g", 2 << 30, true},
		{"2G", 2 << 30, true},
		{"64k", 64 << 10, true},
		{"64K", 64 << 10, true},
		{"1t", 1 << 40, true},
		{"1048576", 1 << 20, true},
		{"0", 0, true},
		{"4194304t", 1 << 62, true},
		{"4194305t", 0, false},                 // beyond 2^62
		{"4611686018427387904", 1 << 62, true}, // sizes are bounded by 2^62 bytes
		{"4611686018427387905", 0, false},
		{"9223372036854775808", 0, false},
		{"", 0, false},
		{"m", 0, false},
		{"-1g", 0, false},
		{"1.5g", 0, false},
		{"1gb", 0, false},
		{"12x", 0, false},
	}
	for _, tc := range tests {
		if got, ok := ParseJavaSize(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("ParseJavaSize(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseXmx(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"-Xmx820m", 820 << 20},
		{"-server -Xms256m -Xmx1g -XX:+UseG1GC", 1 << 30},
		{"-Xmx512m -Xmx2g", 2 << 30}, // the JVM takes the last
		{"-Xmx2g -Xmxjunk", 2 << 30}, // a bad later one is ignored
		{"-Xms512m", 0},
		{"", 0},
		{"-Djava.opts=-Xmx4g", 0}, // inside another option: not a heap size
	}
	for _, tc := range tests {
		if got := ParseXmx(tc.in); got != tc.want {
			t.Errorf("ParseXmx(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestParseLogIndex(t *testing.T) {
	dir := "/var/log/hadoop/userlogs/job_201401011200_0007/attempt_201401011200_0007_m_000012_0"
	tests := []struct {
		in   string
		want string
	}{
		{"LOG_DIR:" + dir + "\nstdout:0 -1\nstderr:0 -1\nsyslog:0 -1\n", dir},
		{"LOG_DIR:" + dir + "\r\nstdout:0 -1\r\n", dir},
		{"LOG_DIR:" + dir, dir},
		{"LOG_DIR:" + dir + ".cleanup\nstdout:0 -1\n", dir + ".cleanup"},
		{"LOG_DIR:\nstdout:0 -1\n", ""},
		{"stdout:0 -1\nLOG_DIR:" + dir + "\n", ""}, // LOG_DIR must be the first line
		{"log_dir:" + dir, ""},
		{"", ""},
	}
	for _, tc := range tests {
		got, ok := ParseLogIndex([]byte(tc.in))
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("ParseLogIndex(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
}

func TestParseTezDAGLog(t *testing.T) {
	for in, want := range map[string]string{
		"2026-12-04 10:00:00,123 [INFO] [IPC Server handler 0] |app.DAGAppMaster|: Running DAG: wordcount\n":              "wordcount",
		"x\n2026-12-04 10:00:00,123 INFO DAGAppMaster: Running DAG: q1 (stage 2), callerContext={ context=HIVE }\nmore\n": "q1 (stage 2)",
		"... Running DAG: half a line":           "",
		"no dag here\n":                          "",
		"Running DAG: with a CR\r\n":             "with a CR",
		"Running DAG: first\nRunning DAG: two\n": "first",
	} {
		if got := ParseTezDAGLog([]byte(in)); got != want {
			t.Errorf("ParseTezDAGLog(%q) = %q, want %q", in, got, want)
		}
	}
}

// bigJobXML is a job.xml of the size a real MapReduce job's is: about 900
// properties (mapred-default's, core-default's, the job's own), each with
// its source, as Configuration.writeXml writes them.
func bigJobXML() []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8" standalone="no"?>` + "\n<configuration>\n")
	for i := 0; i < 900; i++ {
		fmt.Fprintf(&b, "<property><name>mapreduce.some.component.setting.number%d</name><value>value-%d-/some/path/or/class.name.Here%d</value><final>false</final><source>mapred-default.xml</source><source>job.xml</source></property>\n", i, i, i)
	}
	b.WriteString("<property><name>mapreduce.job.name</name><value>wordcount</value><final>false</final><source>job.xml</source></property>\n")
	b.WriteString("<property><name>mapreduce.map.memory.mb</name><value>2048</value><final>false</final><source>job.xml</source></property>\n")
	b.WriteString("</configuration>\n")
	return b.Bytes()
}

func BenchmarkParseConf(b *testing.B) {
	doc := bigJobXML()
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		c, err := ParseConf(bytes.NewReader(doc))
		if err != nil || c.JobConfFor("map").MemoryMB != 2048 {
			b.Fatal(err)
		}
	}
}

// TestJobKeys: JobConfFor reads nothing that JobKeys leaves out, for every
// task type, of a configuration that sets every name it knows.
func TestJobKeys(t *testing.T) {
	full := Conf{}
	for i, k := range jobConfKeys {
		full[k] = fmt.Sprintf("%d", 1000+i)
	}
	full["mapred.child.java.opts"] = "-Xmx512m"
	full["unrelated.key"] = "x"
	// Every name it knows, each set alone: JobConfFor must see each of them.
	for _, k := range jobConfKeys {
		c := Conf{k: "7"}
		if c.JobKeys()[k] != "7" {
			t.Errorf("JobKeys drops %s", k)
		}
	}
	kept := full.JobKeys()
	if _, ok := kept["unrelated.key"]; ok || len(kept) != len(jobConfKeys) {
		t.Errorf("JobKeys kept %d keys, want the %d JobConfFor reads", len(kept), len(jobConfKeys))
	}
	for _, typ := range []string{"map", "reduce", "am", "other"} {
		for _, k := range append([]string{""}, jobConfKeys...) {
			c := Conf{}
			for kk, v := range full {
				if kk != k {
					c[kk] = v
				}
			}
			if got, want := c.JobKeys().JobConfFor(typ), c.JobConfFor(typ); got != want {
				t.Errorf("%s without %q: JobKeys gives %+v, the whole conf %+v", typ, k, got, want)
			}
		}
	}
}
