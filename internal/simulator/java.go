package simulator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// The Java stand-ins, compiled on demand (see compileJava).
//
//go:embed java
var javaSources embed.FS

// javaEnv is the JDK the task JVMs run on.
type javaEnv struct {
	Java    string // <home>/bin/java, symlinks resolved
	Home    string // JAVA_HOME
	Javac   string
	Classes string // the compiled stand-ins
}

// findJava resolves the java binary: explicit, $JAVA_HOME/bin/java, or java in PATH.
func findJava(explicit string) (javaEnv, error) {
	java := explicit
	if java == "" {
		if h := os.Getenv("JAVA_HOME"); h != "" {
			if _, err := os.Stat(filepath.Join(h, "bin", "java")); err == nil {
				java = filepath.Join(h, "bin", "java")
			}
		}
	}
	if java == "" {
		p, err := exec.LookPath("java")
		if err != nil {
			return javaEnv{}, fmt.Errorf("cannot find java (set Options.Java or JAVA_HOME): %w", err)
		}
		java = p
	}
	real, err := filepath.EvalSymlinks(java)
	if err != nil {
		return javaEnv{}, fmt.Errorf("cannot resolve java %s: %w", java, err)
	}
	real, _ = filepath.Abs(real)
	home := filepath.Dir(filepath.Dir(real))
	j := javaEnv{Java: real, Home: home}
	if _, err := os.Stat(filepath.Join(home, "bin", "javac")); err == nil {
		j.Javac = filepath.Join(home, "bin", "javac")
	} else if p, err := exec.LookPath("javac"); err == nil {
		j.Javac = p
	} else {
		return javaEnv{}, fmt.Errorf("cannot find javac next to %s or in PATH", real)
	}
	return j, nil
}

// javaSourceFiles lists the embedded sources, sorted.
func javaSourceFiles() ([]string, error) {
	var files []string
	err := fs.WalkDir(javaSources, "java", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".java") {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// sourcesHash identifies a compilation: the sources and the compiler.
func sourcesHash(javac string) (string, []string, error) {
	files, err := javaSourceFiles()
	if err != nil {
		return "", nil, err
	}
	h := sha256.New()
	h.Write([]byte(javac + "\x00"))
	for _, f := range files {
		b, err := javaSources.ReadFile(f)
		if err != nil {
			return "", nil, err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], files, nil
}

// compileJava compiles the stand-ins once into
// <user cache>/taskscope/sim-classes-<hash> (else <fallback>/sim-classes-<hash>),
// and returns that directory. Concurrent compilations (parallel test
// processes) each compile into their own temporary directory and rename it
// into place; the first rename wins and the others use its result.
func compileJava(ctx context.Context, j javaEnv, fallback string) (string, error) {
	hash, files, err := sourcesHash(j.Javac)
	if err != nil {
		return "", fmt.Errorf("cannot read the embedded java sources: %w", err)
	}
	var parents []string
	if d, err := os.UserCacheDir(); err == nil {
		parents = append(parents, filepath.Join(d, "taskscope"))
	}
	parents = append(parents, fallback)
	var errs []error
	for _, parent := range parents {
		dir := filepath.Join(parent, "sim-classes-"+hash)
		if _, err := os.Stat(filepath.Join(dir, "org", "apache", "hadoop", "mapred", "YarnChild.class")); err == nil {
			return dir, nil
		}
		if err := compileInto(ctx, j, files, parent, dir); err != nil {
			errs = append(errs, err)
			continue
		}
		return dir, nil
	}
	return "", errors.Join(errs...)
}

func compileInto(ctx context.Context, j javaEnv, files []string, parent, dir string) error {
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("cannot create %s: %w", parent, err)
	}
	tmp, err := os.MkdirTemp(parent, ".sim-classes-tmp-")
	if err != nil {
		return fmt.Errorf("cannot create a directory in %s: %w", parent, err)
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	args := []string{"-encoding", "UTF-8", "--release", "11", "-nowarn", "-d", filepath.Join(tmp, "classes")}
	for _, f := range files {
		b, err := javaSources.ReadFile(f)
		if err != nil {
			return err
		}
		p := filepath.Join(src, filepath.FromSlash(strings.TrimPrefix(f, "java/")))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
		args = append(args, p)
	}
	cmd := exec.CommandContext(ctx, j.Javac, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("javac failed: %w: %s", err, bytes.TrimSpace(out.Bytes()))
	}
	if err := os.Chmod(filepath.Join(tmp, "classes"), 0o755); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(tmp, "classes"), dir); err != nil {
		if _, serr := os.Stat(dir); serr == nil {
			return nil // another process won the race
		}
		return fmt.Errorf("cannot move the compiled classes to %s: %w", dir, err)
	}
	return nil
}
