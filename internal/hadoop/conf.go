package hadoop

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// MaxConfBytes bounds how much of a configuration file is read.
const MaxConfBytes = 8 << 20

// Conf is a Hadoop configuration (job.xml, mapred-site.xml): name -> value.
type Conf map[string]string

// ParseConf reads a Hadoop configuration XML document
// (<configuration><property><name/><value/></property>...</configuration>).
// Later definitions of a name win, as in Hadoop, unless an earlier one was final.
func ParseConf(r io.Reader) (Conf, error) {
	d := xml.NewDecoder(io.LimitReader(r, MaxConfBytes))
	d.Strict = true
	conf := Conf{}
	final := map[string]bool{}
	var (
		inProp           bool
		field            string
		name, value, fin strings.Builder
		sawConfiguration bool
	)
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return conf, fmt.Errorf("cannot parse configuration: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "configuration":
				sawConfiguration = true
			case "property":
				inProp = true
				name.Reset()
				value.Reset()
				fin.Reset()
				// Hadoop also accepts attributes: <property name="x" value="y"/>
				for _, a := range t.Attr {
					switch a.Name.Local {
					case "name":
						name.WriteString(a.Value)
					case "value":
						value.WriteString(a.Value)
					case "final":
						fin.WriteString(a.Value)
					}
				}
			default:
				if inProp {
					field = t.Name.Local
				}
			}
		case xml.CharData:
			if !inProp {
				continue
			}
			switch field {
			case "name":
				name.Write(t)
			case "value":
				value.Write(t)
			case "final":
				fin.Write(t)
			}
		case xml.EndElement:
			switch t.Name.Local {
			case "property":
				inProp = false
				n := strings.TrimSpace(name.String())
				if n != "" && !final[n] {
					conf[n] = strings.TrimSpace(value.String())
					if strings.TrimSpace(fin.String()) == "true" {
						final[n] = true
					}
				}
			default:
				field = ""
			}
		}
	}
	if !sawConfiguration {
		return conf, errors.New("cannot parse configuration: no <configuration> element")
	}
	return conf, nil
}

// First returns the value of the first of names that is set.
func (c Conf) First(names ...string) string {
	for _, n := range names {
		if v, ok := c[n]; ok && v != "" {
			return v
		}
	}
	return ""
}

// Int returns the first of names that is set and is an integer.
func (c Conf) Int(names ...string) (int64, bool) {
	for _, n := range names {
		if v, ok := c[n]; ok {
			if i, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return i, true
			}
		}
	}
	return 0, false
}

// JobConf is what taskscope takes from a job's configuration.
type JobConf struct {
	JobName   string `json:"job_name,omitempty"`
	User      string `json:"user,omitempty"`
	Queue     string `json:"queue,omitempty"`
	MemoryMB  int64  `json:"memory_mb,omitempty"` // the container or slot size for this attempt's task type
	VCores    int64  `json:"vcores,omitempty"`    // the container's virtual cores for this attempt's task type
	JavaOpts  string `json:"java_opts,omitempty"`
	XmxBytes  int64  `json:"xmx_bytes,omitempty"`
	Streaming bool   `json:"streaming,omitempty"`
	Reduces   int64  `json:"reduces,omitempty"`
	Maps      int64  `json:"maps,omitempty"`
}

// jobConfKeys are the names JobConfFor reads.
var jobConfKeys = []string{
	"mapreduce.job.name", "mapred.job.name", "mapreduce.job.user.name", "user.name",
	"mapreduce.job.queuename", "mapred.job.queue.name", "stream.map.streamprocessor", "stream.reduce.streamprocessor",
	"mapreduce.job.maps", "mapred.map.tasks", "mapreduce.job.reduces", "mapred.reduce.tasks",
	"mapreduce.map.memory.mb", "mapred.job.map.memory.mb", "mapreduce.map.java.opts", "mapred.map.child.java.opts",
	"mapred.child.java.opts", "mapreduce.reduce.memory.mb", "mapred.job.reduce.memory.mb", "mapreduce.reduce.java.opts",
	"mapred.reduce.child.java.opts", "yarn.app.mapreduce.am.resource.mb", "yarn.app.mapreduce.am.command-opts",
	"mapreduce.map.cpu.vcores", "mapreduce.reduce.cpu.vcores", "yarn.app.mapreduce.am.resource.cpu-vcores",
}

// JobKeys is the part of c that JobConfFor reads: what is worth keeping of
// a job's configuration (a real job.xml has some 900 properties).
func (c Conf) JobKeys() Conf {
	out := make(Conf, len(jobConfKeys))
	for _, k := range jobConfKeys {
		if v, ok := c[k]; ok {
			out[k] = v
		}
	}
	return out
}

// JobConfFor extracts the settings for one task type ("map", "reduce", "am", ...)
// under both Hadoop 1 and Hadoop 2/3 names (jobConfKeys: keep the two in step).
func (c Conf) JobConfFor(taskType string) JobConf {
	j := JobConf{
		JobName: c.First("mapreduce.job.name", "mapred.job.name"),
		User:    c.First("mapreduce.job.user.name", "user.name"),
		Queue:   c.First("mapreduce.job.queuename", "mapred.job.queue.name"),
	}
	if j.Queue == "" {
		j.Queue = "default"
	}
	j.Streaming = c.First("stream.map.streamprocessor", "stream.reduce.streamprocessor") != ""
	j.Maps, _ = c.Int("mapreduce.job.maps", "mapred.map.tasks")
	j.Reduces, _ = c.Int("mapreduce.job.reduces", "mapred.reduce.tasks")
	switch taskType {
	case "map":
		j.MemoryMB, _ = c.Int("mapreduce.map.memory.mb", "mapred.job.map.memory.mb")
		j.VCores, _ = c.Int("mapreduce.map.cpu.vcores")
		j.JavaOpts = c.First("mapreduce.map.java.opts", "mapred.map.child.java.opts", "mapred.child.java.opts")
	case "reduce":
		j.MemoryMB, _ = c.Int("mapreduce.reduce.memory.mb", "mapred.job.reduce.memory.mb")
		j.VCores, _ = c.Int("mapreduce.reduce.cpu.vcores")
		j.JavaOpts = c.First("mapreduce.reduce.java.opts", "mapred.reduce.child.java.opts", "mapred.child.java.opts")
	case "am":
		j.MemoryMB, _ = c.Int("yarn.app.mapreduce.am.resource.mb")
		j.VCores, _ = c.Int("yarn.app.mapreduce.am.resource.cpu-vcores")
		j.JavaOpts = c.First("yarn.app.mapreduce.am.command-opts")
	default:
		j.JavaOpts = c.First("mapred.child.java.opts")
	}
	j.XmxBytes = ParseXmx(j.JavaOpts)
	return j
}

// ParseXmx returns the last -Xmx in a java options string or argv, in bytes, 0 if none.
func ParseXmx(opts string) int64 {
	var last int64
	for _, w := range strings.Fields(opts) {
		if v, ok := strings.CutPrefix(w, "-Xmx"); ok {
			if n, ok := ParseJavaSize(v); ok {
				last = n
			}
		}
	}
	return last
}

// ParseJavaSize parses a JVM size such as 512m, 2g, 1048576, 64k.
func ParseJavaSize(v string) (int64, bool) {
	if v == "" {
		return 0, false
	}
	mult := int64(1)
	switch v[len(v)-1] {
	case 'k', 'K':
		mult = 1 << 10
	case 'm', 'M':
		mult = 1 << 20
	case 'g', 'G':
		mult = 1 << 30
	case 't', 'T':
		mult = 1 << 40
	}
	if mult != 1 {
		v = v[:len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, false
	}
	return n * mult, true
}

// ParseLogIndex returns the LOG_DIR of a Hadoop 1 log.index file: its first
// line is "LOG_DIR:<dir>" naming the JVM's first attempt's log directory.
func ParseLogIndex(b []byte) (string, bool) {
	line := b
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		line = b[:i]
	}
	dir, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("LOG_DIR:"))
	if !ok || len(dir) == 0 {
		return "", false
	}
	return string(dir), true
}

// ParseTezDAGLog finds the DAG's name in the head of a Tez
// ApplicationMaster's DAG log (syslog_dag_<dag id>): DAGAppMaster logs
// "Running DAG: <name>", followed since Tez 0.9 by ", callerContext=..."
// when the DAG has one. Empty when there is no such line.
func ParseTezDAGLog(b []byte) string {
	const mark = "Running DAG: "
	i := bytes.Index(b, []byte(mark))
	if i < 0 {
		return ""
	}
	line := b[i+len(mark):]
	j := bytes.IndexByte(line, '\n')
	if j < 0 {
		return "" // cut off: the line is not whole yet
	}
	line = line[:j]
	if j := bytes.Index(line, []byte(", callerContext=")); j >= 0 {
		line = line[:j]
	}
	return strings.TrimSpace(string(bytes.TrimRight(line, "\r")))
}
