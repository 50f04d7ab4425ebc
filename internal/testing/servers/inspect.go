package servers

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// State is what [Inspect] found of a server.
type State string

// The states of a server found through its pid file.
const (
	StateHealthy   State = "healthy"   // running and answering its health check
	StateUnhealthy State = "unhealthy" // running, not answering
	StatePaused    State = "paused"    // stopped by SIGSTOP
	StateDead      State = "dead"      // its pid file remains, its process is gone
)

// Status is one server found in a directory by [Inspect].
type Status struct {
	Kind  Kind
	Name  string
	Addr  string
	Pid   int
	Dir   string
	Log   string
	State State
	Err   error // why it is unhealthy
}

// Inspect finds the servers whose pid files are in dir (at any depth up to
// three), of the given kinds (all when none is given), and checks each:
// alive, paused, and whether it answers its health check within 2 s. It
// returns them sorted by directory.
func Inspect(ctx context.Context, dir string, kinds ...Kind) ([]Status, error) {
	recs, err := findRecords(dir, kinds)
	if err != nil {
		return nil, err
	}
	out := make([]Status, len(recs))
	var wg sync.WaitGroup
	for i, r := range recs {
		out[i] = Status{Kind: r.Kind, Name: r.Name, Addr: r.Addr, Pid: r.Pid, Dir: r.dir, Log: r.Log}
		switch {
		case !r.alive():
			out[i].State = StateDead
		case r.paused():
			out[i].State = StatePaused
		default:
			wg.Go(func() {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				out[i].State = StateHealthy
				if err := probe(pctx, r.Kind, r.Addr); err != nil {
					out[i].State, out[i].Err = StateUnhealthy, err
				}
			})
		}
	}
	wg.Wait()
	return out, nil
}

// StopDir stops the servers whose pid files are in dir, of the given kinds
// (all when none is given), as [Proc.Stop] does, all at once, and removes
// their pid files (also those of servers that are gone). It is how a later
// process stops detached servers.
func StopDir(dir string, kinds ...Kind) error {
	recs, err := findRecords(dir, kinds)
	if err != nil {
		return err
	}
	var etcd, others []*Proc
	for _, r := range recs {
		p := &Proc{kind: r.Kind, name: r.Name, dir: r.dir, addr: r.Addr, pid: r.Pid, started: r.Started, stopSignal: stopSignalOf(r.Kind)}
		if r.Kind == KindEtcd {
			etcd = append(etcd, p)
		} else {
			others = append(others, p)
		}
	}
	var wg sync.WaitGroup
	var errEtcd, errOthers error
	wg.Go(func() { errEtcd = stopEtcdMembers(etcd) })
	wg.Go(func() { errOthers = stopMembers(others) })
	wg.Wait()
	for _, r := range recs {
		if !r.alive() {
			_ = os.Remove(filepath.Join(r.dir, pidFile))
		}
	}
	return errors.Join(errEtcd, errOthers)
}

func stopSignalOf(k Kind) syscall.Signal {
	if k == KindPostgres {
		return syscall.SIGINT
	}
	return syscall.SIGTERM
}

func findRecords(dir string, kinds []Kind) ([]record, error) {
	var recs []record
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path == dir {
				return fs.SkipAll
			}
			if errors.Is(err, fs.ErrPermission) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			if d.Name() == "data" || strings.Count(rel, string(filepath.Separator)) >= 2 {
				return fs.SkipDir
			}
			return nil
		}
		if d.Name() != pidFile {
			return nil
		}
		r, err := readRecord(filepath.Dir(path))
		if err != nil {
			return err
		}
		if len(kinds) == 0 || slices.Contains(kinds, r.Kind) {
			recs = append(recs, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(recs, func(a, b record) int { return strings.Compare(sortKey(a), sortKey(b)) })
	return recs, nil
}

// sortKey orders records by kind (as in Kinds, then Jaeger), then by
// directory with numbers in natural order (redis-2 before redis-10).
func sortKey(r record) string {
	k := slices.Index(Kinds, r.Kind)
	if k < 0 {
		k = len(Kinds)
	}
	var b strings.Builder
	b.WriteByte(byte('0' + k))
	num := ""
	for _, c := range r.dir {
		if c >= '0' && c <= '9' {
			num += string(c)
			continue
		}
		if num != "" {
			b.WriteString(strings.Repeat("0", max(0, 8-len(num))) + num)
			num = ""
		}
		b.WriteRune(c)
	}
	b.WriteString(strings.Repeat("0", max(0, 8-len(num))) + num)
	return b.String()
}
