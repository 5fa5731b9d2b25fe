package hadoop

import (
	"bytes"
	"maps"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// tezConfPB renders a tez-conf.pb of the keys and values.
func tezConfPB(kv ...string) []byte {
	var out []byte
	for i := 0; i+1 < len(kv); i += 2 {
		out = AppendTezConf(out, kv[i], kv[i+1])
	}
	return out
}

func TestTezConf(t *testing.T) {
	b := tezConfPB("tez.queue.name", "etl", "tez.task.resource.memory.mb", "3072", "tez.am.resource.memory.mb", "1536",
		"tez.task.launch.cmd-opts", "-XX:+UseParallelGC -Xmx2458m", "tez.am.launch.cmd-opts", "-Xmx1228m", "user.name", "hive",
		"tez.task.resource.cpu.vcores", "2", "tez.am.resource.cpu.vcores", "1")
	// A field Tez may add later is skipped, in the message and in a pair.
	b = protowire.AppendTag(b, 7, protowire.VarintType)
	b = protowire.AppendVarint(b, 42)
	c, err := ParseTezConf(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.TezConfFor(false); got != (JobConf{User: "hive", Queue: "etl", MemoryMB: 3072, VCores: 2, JavaOpts: "-XX:+UseParallelGC -Xmx2458m", XmxBytes: 2458 << 20}) {
		t.Errorf("task container: %+v", got)
	}
	if got := c.TezConfFor(true); got.MemoryMB != 1536 || got.VCores != 1 || got.XmxBytes != 1228<<20 || got.Queue != "etl" {
		t.Errorf("AM: %+v", got)
	}
	// Without tez.queue.name the DAG goes to YARN's default queue; without
	// tez.*.resource.cpu.vcores (tez-conf.pb holds what was set, not Tez's
	// defaults) a container has Tez's default, 1 (the e2e test's Tez
	// containers had 0 when the NodeManager's word came too late).
	c, err = ParseTezConf(bytes.NewReader(tezConfPB("tez.task.resource.memory.mb", "1024", "tez.am.resource.cpu.vcores", "0")))
	if err != nil || c.TezConfFor(false).Queue != "default" || c.TezConfFor(false).VCores != 1 || c.TezConfFor(true).VCores != 1 {
		t.Errorf("no queue or vcores set: %+v, %+v, %v", c.TezConfFor(false), c.TezConfFor(true), err)
	}
	for name, bad := range map[string][]byte{
		"cut in a pair":  b[:len(b)-20],
		"a bad tag":      {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"a pair cut off": append(protowire.AppendTag(nil, 1, protowire.BytesType), 5, 0x0a, 0x10),
	} {
		if _, err := ParseTezConf(bytes.NewReader(bad)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := ParseTezConf(bytes.NewReader(make([]byte, MaxConfBytes+1))); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("an oversized file: %v", err)
	}
}

func TestSparkConf(t *testing.T) {
	mb := int64(1 << 20)
	for _, c := range []struct {
		name  string
		props string
		am    bool
		want  JobConf
	}{
		{name: "executor, overhead set", props: "spark.app.name=daily\\: load\nspark.yarn.queue=etl\nspark.executor.memory=2g\nspark.executor.memoryOverhead=512\nspark.user=bob\nspark.executor.cores=4\n",
			want: JobConf{JobName: "daily: load", User: "bob", Queue: "etl", MemoryMB: 2560, VCores: 4, XmxBytes: 2048 * mb}},
		{name: "executor, overhead a tenth", props: "spark.executor.memory=8g\n",
			want: JobConf{Queue: "default", MemoryMB: 8192 + 819, VCores: 1, XmxBytes: 8192 * mb}},
		{name: "executor, overhead at least 384 MiB", props: "spark.executor.memory=1024m\n",
			want: JobConf{Queue: "default", MemoryMB: 1024 + 384, VCores: 1, XmxBytes: 1024 * mb}},
		{name: "executor, Spark's default heap", props: "spark.app.name=x\n",
			want: JobConf{JobName: "x", Queue: "default", MemoryMB: 1024 + 384, VCores: 1, XmxBytes: 1024 * mb}},
		{name: "executor, factor, PySpark and off-heap", props: "spark.executor.memory=4g\nspark.executor.memoryOverheadFactor=0.25\n" +
			"spark.executor.pyspark.memory=512m\nspark.memory.offHeap.enabled=true\nspark.memory.offHeap.size=1gb\nspark.executor.extraJavaOptions=-XX:+UseG1GC\n",
			want: JobConf{Queue: "default", MemoryMB: 4096 + 1024 + 512 + 1024, VCores: 1, XmxBytes: 4096 * mb, JavaOpts: "-XX:+UseG1GC"}},
		{name: "client mode's AM", am: true, props: "spark.yarn.am.memory=256m\nspark.executor.memory=8g\n",
			want: JobConf{Queue: "default", MemoryMB: 256 + 384, VCores: 1, XmxBytes: 256 * mb}},
		{name: "cluster mode's AM is the driver", am: true, props: "spark.submit.deployMode=cluster\nspark.driver.memory=4g\nspark.driver.memoryOverhead=1g\nspark.yarn.queue=adhoc\nspark.driver.cores=2\nspark.executor.cores=4\n",
			want: JobConf{Queue: "adhoc", MemoryMB: 5120, VCores: 2, XmxBytes: 4096 * mb}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conf, err := ParseSparkConf(strings.NewReader("#Spark configuration.\n#Mon Dec 07 10:00:00 UTC 2026\n" + c.props))
			if err != nil {
				t.Fatal(err)
			}
			if got := conf.SparkConfFor(c.am); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
	for _, v := range []struct {
		in   string
		want int64
	}{{"512", 512 << 20}, {"512m", 512 << 20}, {"2g", 2 << 30}, {"2gb", 2 << 30}, {"1024kb", 1 << 20}, {"100b", 100}, {"", -1}, {"g", -1}, {"x1g", -1}} {
		got, ok := sparkSize(v.in)
		if !ok {
			got = -1
		}
		if got != v.want {
			t.Errorf("sparkSize(%q) = %d, want %d", v.in, got, v.want)
		}
	}
}

func FuzzParseTezConf(f *testing.F) {
	f.Add(tezConfPB("tez.queue.name", "etl", "tez.task.resource.memory.mb", "3072"))
	f.Add([]byte{0x0a, 0x02, 0x0a})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseTezConf(bytes.NewReader(b))
		if err != nil {
			return
		}
		j := c.TezConfFor(false)
		if j.Queue == "" || j.MemoryMB < 0 && c["tez.task.resource.memory.mb"] == "" {
			t.Fatalf("%+v from %v", j, c)
		}
		// What it read is written back the same.
		var kv []string
		for k, v := range c {
			kv = append(kv, k, v)
		}
		again, err := ParseTezConf(bytes.NewReader(tezConfPB(kv...)))
		if err != nil || len(again) != len(c) {
			t.Fatalf("%v does not read back: %v, %v", c, again, err)
		}
	})
}

func FuzzParseSparkConf(f *testing.F) {
	f.Add("spark.app.name=daily\\: load\nspark.yarn.queue=etl\nspark.executor.memory=2g\n")
	f.Add("a\\\n b = c\\u0041\n!x\n")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseSparkConf(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, am := range []bool{false, true} {
			j := c.SparkConfFor(am)
			if j.Queue == "" || j.MemoryMB < 384 && c.First("spark.executor.memory", "spark.driver.memory", "spark.yarn.am.memory", "spark.executor.memoryOverhead",
				"spark.driver.memoryOverhead", "spark.yarn.am.memoryOverhead", "spark.executor.minMemoryOverhead", "spark.driver.minMemoryOverhead", "spark.yarn.am.minMemoryOverhead") == "" {
				t.Fatalf("%+v from %q", j, s)
			}
		}
	})
}

// parseProperties reads what java.util.Properties.load reads.
func TestParseProperties(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Conf
	}{
		{"a=b\nc = d\ne:f\ng h\n", Conf{"a": "b", "c": "d", "e": "f", "g": "h"}},
		{"# comment\n! comment\n   \n\tk=v\\\n   ontinued\r\nx=1\ry=2", Conf{"k": "vontinued", "x": "1", "y": "2"}},
		{"# a comment ending in a backslash is not continued\\\nk=v", Conf{"k": "v"}},
		{"k=a\\\\\nl=b", Conf{"k": `a\`, "l": "b"}},
		{"key\\ with\\:seps\\==v\\:w\\=x\\ty\\u0041\\uD83D\\uDE00\\z", Conf{"key with:seps=": "v:w=x\tyA😀z"}},
		{"=b\nk\n", Conf{"": "b", "k": ""}},
		{"k=trailing  ", Conf{"k": "trailing  "}},
		{"k=v\\", Conf{"k": "v"}},
		{"k=last\nk=again", Conf{"k": "again"}},
	} {
		got, err := parseProperties([]byte(c.in))
		if err != nil || !maps.Equal(got, c.want) {
			t.Errorf("%q: %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"k=\\u00", "k=\\uzzzz", "\\u12=v"} {
		if _, err := parseProperties([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
