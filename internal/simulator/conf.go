package simulator

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/taskscope/taskscope/internal/hadoop"
)

// kv is one configuration entry or environment variable; lists of them keep
// their order, as Hadoop's files do.
type kv struct {
	K string `json:"k"`
	V string `json:"v"`
}

// confList is an ordered configuration: set replaces in place.
type confList []kv

func (c *confList) set(k, v string) {
	for i := range *c {
		if (*c)[i].K == k {
			(*c)[i].V = v
			return
		}
	}
	*c = append(*c, kv{k, v})
}

func (c confList) get(k string) string {
	for _, e := range c {
		if e.K == k {
			return e.V
		}
	}
	return ""
}

func (c confList) clone() confList { return append(confList(nil), c...) }

// xmlConf renders a Hadoop configuration file, as Configuration.writeXml does.
func xmlConf(c confList, source string) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8" standalone="no"?>` + "\n<configuration>\n")
	for _, e := range c {
		b.WriteString("<property><name>")
		xml.EscapeText(&b, []byte(e.K))
		b.WriteString("</name><value>")
		xml.EscapeText(&b, []byte(e.V))
		b.WriteString("</value><final>false</final><source>")
		xml.EscapeText(&b, []byte(source))
		b.WriteString("</source></property>\n")
	}
	b.WriteString("</configuration>\n")
	return b.Bytes()
}

// propertiesConf renders a Java properties file (Spark's __spark_conf__.properties).
func propertiesConf(c confList) []byte {
	var b bytes.Buffer
	b.WriteString("#Spark configuration.\n")
	for _, e := range c {
		b.WriteString(propEscape(e.K, true))
		b.WriteByte('=')
		b.WriteString(propEscape(e.V, false))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func propEscape(s string, key bool) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '\\' || r == '=' || r == ':' || r == '#' || r == '!':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == ' ' && (key || i == 0):
			b.WriteString(`\ `)
		case r == '\n':
			b.WriteString(`\n`)
		case r > 0x7e || r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// tezConfPB renders Tez's tez-conf.pb: a ConfigurationProto
// (repeated PlanKeyValuePair confKeyValues = 1; key = 1, value = 2).
func tezConfPB(c confList) []byte {
	var out []byte
	for _, e := range c {
		out = hadoop.AppendTezConf(out, e.K, e.V)
	}
	return out
}

// writeFileAtomic writes data to path through a temporary file and a rename,
// so that a process reading path sees the old or the new content.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp, mode)
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("cannot write %s: %w", path, werr)
	}
	return nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
