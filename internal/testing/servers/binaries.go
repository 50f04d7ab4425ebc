package servers

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// MissingError says that a server's program is not installed. Its message
// names the program, the Debian package that provides it and the command
// that installs it.
type MissingError struct {
	Kind    Kind
	Program string // "redis-server", "initdb", "java", "zookeeper.jar"
	Package string // the Debian package: "redis-server"
	Looked  []string
}

func (e *MissingError) Error() string {
	where := "on PATH"
	if strings.HasSuffix(e.Program, ".jar") {
		where = "in " + strings.Join(e.Looked, ", ")
	} else if len(e.Looked) > 0 {
		where += " or in " + strings.Join(e.Looked, ", ")
	}
	return fmt.Sprintf("servers: %s needs %s, which is not installed (not found %s); it is in the Debian package %s: run `scripts/services install` (as root) or `apt-get install %s`",
		e.Kind, e.Program, where, e.Package, e.Package)
}

// IsMissing reports whether err says that a server's program is not
// installed.
func IsMissing(err error) bool {
	var me *MissingError
	return errors.As(err, &me)
}

// Missing returns an error for each program that kinds need and this
// machine lacks, in the order of kinds; nil when everything is installed.
func Missing(kinds ...Kind) []*MissingError {
	var out []*MissingError
	add := func(err error) {
		var me *MissingError
		if errors.As(err, &me) {
			out = append(out, me)
		}
	}
	for _, k := range kinds {
		switch k {
		case KindPostgres:
			_, err := postgresBinaries()
			add(err)
		case KindRedis:
			_, err := redisBinary()
			add(err)
		case KindEtcd:
			_, err := etcdBinary()
			add(err)
		case KindZooKeeper:
			// Java and the jar are two packages: a machine with neither
			// needs both listed, not the first one found missing.
			_, err := zookeeperJava()
			add(err)
			_, err = zookeeperClasspath()
			add(err)
		}
	}
	return out
}

// lookProgram finds name on PATH, then in dirs.
func lookProgram(kind Kind, name, pkg string, dirs ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &MissingError{Kind: kind, Program: name, Package: pkg, Looked: dirs}
}

type pgBinaries struct{ initdb, postgres string }

// postgresBinaries finds postgres and the initdb beside it. Debian keeps
// them off PATH in /usr/lib/postgresql/VERSION/bin; the newest version wins.
func postgresBinaries() (pgBinaries, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return pgVersion(b) - pgVersion(a) })
	dirs = append(dirs, "/usr/local/pgsql/bin")
	pg, err := lookProgram(KindPostgres, "postgres", "postgresql", dirs...)
	if err != nil {
		return pgBinaries{}, err
	}
	if real, err := filepath.EvalSymlinks(pg); err == nil {
		pg = real
	}
	initdb := filepath.Join(filepath.Dir(pg), "initdb")
	if _, err := os.Stat(initdb); err != nil {
		initdb, err = lookProgram(KindPostgres, "initdb", "postgresql", dirs...)
		if err != nil {
			return pgBinaries{}, err
		}
	}
	return pgBinaries{initdb: initdb, postgres: pg}, nil
}

func pgVersion(binDir string) int {
	v := filepath.Base(filepath.Dir(binDir))
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func redisBinary() (string, error) {
	return lookProgram(KindRedis, "redis-server", "redis-server", "/usr/bin", "/usr/local/bin")
}

func etcdBinary() (string, error) {
	return lookProgram(KindEtcd, "etcd", "etcd-server", "/usr/bin", "/usr/local/bin")
}

func zookeeperJava() (string, error) {
	var dirs []string
	if home := os.Getenv("JAVA_HOME"); home != "" {
		dirs = append(dirs, filepath.Join(home, "bin"))
	}
	dirs = append(dirs, "/usr/bin")
	return lookProgram(KindZooKeeper, "java", "default-jre-headless", dirs...)
}

// zookeeperClasspath returns the class path of a ZooKeeper server: Debian's
// jar (whose manifest lists its dependencies) plus slf4j-simple so that the
// server logs to standard error, or the jars of a release unpacked in
// $ZOOKEEPER_HOME or /opt/zookeeper.
func zookeeperClasspath() (string, error) {
	const debian = "/usr/share/java/zookeeper.jar"
	if _, err := os.Stat(debian); err == nil {
		cp := []string{debian}
		for _, j := range []string{"/usr/share/java/slf4j-simple.jar"} {
			if _, err := os.Stat(j); err == nil {
				cp = append(cp, j)
			}
		}
		return strings.Join(cp, ":"), nil
	}
	var looked []string
	for _, home := range []string{os.Getenv("ZOOKEEPER_HOME"), "/opt/zookeeper"} {
		if home == "" {
			continue
		}
		looked = append(looked, filepath.Join(home, "lib"))
		jars, _ := filepath.Glob(filepath.Join(home, "lib", "*.jar"))
		if slices.ContainsFunc(jars, func(j string) bool { return strings.Contains(filepath.Base(j), "zookeeper-3") }) {
			return strings.Join(jars, ":"), nil
		}
	}
	return "", &MissingError{Kind: KindZooKeeper, Program: "zookeeper.jar", Package: "zookeeper", Looked: append([]string{filepath.Dir(debian)}, looked...)}
}
