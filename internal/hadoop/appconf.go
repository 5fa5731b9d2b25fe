package hadoop

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// Tez and Spark describe a job in their own files, localized into every
// container's working directory: Tez's tez-conf.pb (the TezConfiguration
// the client submitted, a ConfigurationProto) and Spark's
// __spark_conf__/__spark_conf__.properties (the SparkConf, as Java
// properties). Their JobConf is what JobConfFor is for MapReduce's job.xml.

// TezConfFile and SparkConfFile are where a container finds its job's
// configuration, relative to its working directory.
const (
	TezConfFile   = "tez-conf.pb"
	SparkConfFile = "__spark_conf__/__spark_conf__.properties"
)

// readConfFile reads a configuration file of at most MaxConfBytes.
func readConfFile(r io.Reader, name string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxConfBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", name, err)
	}
	if len(b) > MaxConfBytes {
		return nil, fmt.Errorf("cannot parse %s: larger than %d bytes", name, MaxConfBytes)
	}
	return b, nil
}

// ParseTezConf reads Tez's tez-conf.pb: a ConfigurationProto, whose
// field 1 repeats a PlanKeyValuePair (key = 1, value = 2). Fields it does
// not know are skipped; at most MaxConfBytes are read.
func ParseTezConf(r io.Reader) (Conf, error) {
	b, err := readConfFile(r, TezConfFile)
	if err != nil {
		return nil, err
	}
	conf := Conf{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return conf, fmt.Errorf("cannot parse tez-conf.pb: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return conf, fmt.Errorf("cannot parse tez-conf.pb: %w", protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		pair, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return conf, fmt.Errorf("cannot parse tez-conf.pb: %w", protowire.ParseError(n))
		}
		b = b[n:]
		k, v, err := parseKeyValue(pair)
		if err != nil {
			return conf, err
		}
		if k != "" {
			conf[k] = v
		}
	}
	return conf, nil
}

// AppendTezConf appends a PlanKeyValuePair to a ConfigurationProto, as
// Tez's client writes tez-conf.pb.
func AppendTezConf(b []byte, key, value string) []byte {
	var pair []byte
	pair = protowire.AppendTag(pair, 1, protowire.BytesType)
	pair = protowire.AppendString(pair, key)
	pair = protowire.AppendTag(pair, 2, protowire.BytesType)
	pair = protowire.AppendString(pair, value)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendBytes(b, pair)
}

// parseKeyValue reads a PlanKeyValuePair.
func parseKeyValue(b []byte) (k, v string, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", "", fmt.Errorf("cannot parse tez-conf.pb's pair: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			s, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", "", fmt.Errorf("cannot parse tez-conf.pb's pair: %w", protowire.ParseError(n))
			}
			b = b[n:]
			if num == 1 {
				k = strings.TrimSpace(string(s))
			} else {
				v = strings.TrimSpace(string(s))
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", "", fmt.Errorf("cannot parse tez-conf.pb's pair: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return k, v, nil
}

// vcores is the virtual cores the setting name gives a container, or the
// framework's default where it is unset or not a positive number: Tez's
// tez-conf.pb and Spark's __spark_conf__ hold what was set, not their
// defaults (tez.{task,am}.resource.cpu.vcores, spark.{executor,driver}.cores
// on YARN and spark.yarn.am.cores are 1 then), where a MapReduce job.xml
// holds mapred-default.xml's too.
func (c Conf) vcores(name string) int64 {
	if v, ok := c.Int(name); ok && v > 0 {
		return v
	}
	return 1
}

// TezConfFor extracts what a Tez container's tez-conf.pb says: the queue
// (tez.queue.name, YARN's default queue when unset), and the container's
// size and java options: the ApplicationMaster's (tez.am.*) or a task
// container's (tez.task.*). A vertex may ask for other sizes (Hive's
// hive.tez.container.size): what the NodeManager allocated says the size
// of each container.
func (c Conf) TezConfFor(am bool) JobConf {
	j := JobConf{User: c.First("user.name"), Queue: c.First("tez.queue.name")}
	if j.Queue == "" {
		j.Queue = "default"
	}
	if am {
		j.MemoryMB, _ = c.Int("tez.am.resource.memory.mb")
		j.VCores = c.vcores("tez.am.resource.cpu.vcores")
		j.JavaOpts = c.First("tez.am.launch.cmd-opts")
	} else {
		j.MemoryMB, _ = c.Int("tez.task.resource.memory.mb")
		j.VCores = c.vcores("tez.task.resource.cpu.vcores")
		j.JavaOpts = c.First("tez.task.launch.cmd-opts")
	}
	j.XmxBytes = ParseXmx(j.JavaOpts)
	return j
}

// ParseSparkConf reads Spark's __spark_conf__.properties (Java properties,
// written by SparkConf through Properties.store: escapes such as "\:" are
// undone). At most MaxConfBytes are read.
func ParseSparkConf(r io.Reader) (Conf, error) {
	b, err := readConfFile(r, SparkConfFile)
	if err != nil {
		return nil, err
	}
	conf, err := parseProperties(b)
	if err != nil {
		return nil, fmt.Errorf("cannot parse __spark_conf__.properties: %w", err)
	}
	return conf, nil
}

// parseProperties reads Java properties as java.util.Properties.load
// does: logical lines (a line ending in an odd number of backslashes goes
// on, the next one's leading blanks skipped), comments (# or ! first),
// a key up to an unescaped '=', ':' or blank, escapes (\uXXXX, \t, \n,
// \r, \f, any other character as itself). The last definition of a key
// wins. (github.com/magiconair/properties leaks a goroutine on some valid
// input, such as "=b": not for an agent.)
func parseProperties(b []byte) (Conf, error) {
	conf := Conf{}
	var line []byte
	for len(b) > 0 {
		// One logical line.
		line = line[:0]
		for first := true; ; first = false {
			i := 0
			if !first {
				for i < len(b) && isPropBlank(b[i]) {
					i++
				}
			}
			end := bytes.IndexAny(b[i:], "\r\n")
			if end < 0 {
				end = len(b) - i
			}
			nat := b[i : i+end]
			b = b[i+end:]
			if len(b) > 0 && b[0] == '\r' {
				b = b[1:]
			}
			if len(b) > 0 && b[0] == '\n' {
				b = b[1:]
			}
			if first {
				t := bytes.TrimLeft(nat, " \t\f")
				if len(t) == 0 || t[0] == '#' || t[0] == '!' {
					break // a blank or comment line: never continued
				}
				nat = t
			}
			slashes := 0
			for k := len(nat) - 1; k >= 0 && nat[k] == '\\'; k-- {
				slashes++
			}
			if slashes%2 == 1 && len(b) > 0 {
				line = append(line, nat[:len(nat)-1]...)
				continue
			}
			if slashes%2 == 1 {
				nat = nat[:len(nat)-1] // a continuation at the end of the file
			}
			line = append(line, nat...)
			break
		}
		if len(line) == 0 {
			continue
		}
		// The key ends at an unescaped separator or blank.
		k := 0
		for k < len(line) && !(line[k] == '=' || line[k] == ':' || isPropBlank(line[k])) {
			if line[k] == '\\' {
				k++
			}
			k++
		}
		k = min(k, len(line))
		v := k
		for v < len(line) && isPropBlank(line[v]) {
			v++
		}
		if v < len(line) && (line[v] == '=' || line[v] == ':') {
			v++
		}
		for v < len(line) && isPropBlank(line[v]) {
			v++
		}
		key, err := unescapeProperty(line[:k])
		if err != nil {
			return conf, err
		}
		val, err := unescapeProperty(line[v:])
		if err != nil {
			return conf, err
		}
		conf[key] = val
	}
	return conf, nil
}

func isPropBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\f' }

// unescapeProperty undoes a properties file's escapes.
func unescapeProperty(s []byte) (string, error) {
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s), nil
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			out.WriteByte(c)
			continue
		}
		i++
		switch s[i] {
		case 't':
			out.WriteByte('\t')
		case 'n':
			out.WriteByte('\n')
		case 'r':
			out.WriteByte('\r')
		case 'f':
			out.WriteByte('\f')
		case 'u':
			r, ok := hex4(s[i+1:])
			if !ok {
				return "", fmt.Errorf("malformed \\uxxxx escape in %q", s)
			}
			i += 4
			// A surrogate pair is two escapes.
			if utf16.IsSurrogate(r) && i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
				if r2, ok := hex4(s[i+3:]); ok {
					if c := utf16.DecodeRune(r, r2); c != utf8.RuneError {
						r = c
						i += 6
					}
				}
			}
			out.WriteRune(r)
		default:
			out.WriteByte(s[i])
		}
	}
	return out.String(), nil
}

// SparkConfFor extracts what a Spark container's SparkConf says: the
// application's name, its user and queue (spark.yarn.queue, "default" when
// unset, as Spark's client submits it), and the container's memory as
// Spark's YARN allocator asks for it: the heap, its overhead (the memory
// overhead setting, else its factor of the heap, 0.1 by default, at least
// its minimum, 384 MiB by default), PySpark's workers' memory and the off-heap memory when enabled.
// An ApplicationMaster's container is the driver's in cluster mode, and
// spark.yarn.am.memory's in client mode (ExecutorLauncher).
func (c Conf) SparkConfFor(am bool) JobConf {
	j := JobConf{JobName: c.First("spark.app.name"), User: c.First("spark.user"), Queue: c.First("spark.yarn.queue")}
	if j.Queue == "" {
		j.Queue = "default"
	}
	role := "spark.executor."
	switch {
	case am && c.First("spark.submit.deployMode") == "cluster":
		role = "spark.driver."
	case am:
		role = "spark.yarn.am."
	}
	heap, ok := sparkSize(c.First(role + "memory"))
	if !ok {
		heap = 1 << 30 // Spark's defaults: 1g for executors and drivers, 512m for client mode's AM
		if role == "spark.yarn.am." {
			heap = 512 << 20
		}
	}
	over, ok := sparkSize(c.First(role + "memoryOverhead"))
	if !ok {
		factor, least := 0.1, int64(384<<20)
		if f, err := strconv.ParseFloat(c.First(role+"memoryOverheadFactor"), 64); err == nil && f > 0 && f < 10 {
			factor = f // Spark 3.3 on
		}
		if m, ok := sparkSize(c.First(role + "minMemoryOverhead")); ok {
			least = m // Spark 4 on
		}
		over = max(int64(float64(heap)*factor), least)
	}
	total := heap + over
	if role == "spark.executor." {
		if py, ok := sparkSize(c.First("spark.executor.pyspark.memory")); ok {
			total += py
		}
		if strings.EqualFold(c.First("spark.memory.offHeap.enabled"), "true") {
			if off, ok := sparkSize(c.First("spark.memory.offHeap.size")); ok {
				total += off
			}
		}
	}
	j.MemoryMB = total >> 20
	j.VCores = c.vcores(role + "cores") // spark.executor.cores, spark.driver.cores, spark.yarn.am.cores
	j.JavaOpts = c.First(role + "extraJavaOptions")
	j.XmxBytes = heap
	return j
}

// sparkSize parses a Spark memory setting: a JVM size, MiB when it has no
// unit (Spark also takes "b", "kb", "mb", "gb", "tb" suffixes).
func sparkSize(v string) (int64, bool) {
	v = strings.ToLower(strings.TrimSpace(v))
	if v == "" {
		return 0, false
	}
	if s, ok := strings.CutSuffix(v, "b"); ok && s != "" {
		switch s[len(s)-1] {
		case 'k', 'm', 'g', 't':
			v = s
		default:
			return ParseJavaSize(s) // bytes
		}
	}
	if c := v[len(v)-1]; c >= '0' && c <= '9' {
		v += "m"
	}
	return ParseJavaSize(v)
}

// hex4 reads the four hex digits of a \\u escape.
func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s[:4]), 16, 16)
	return rune(v), err == nil
}
