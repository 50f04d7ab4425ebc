package servers

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

func (p *Proc) recordLocked() record {
	return record{Kind: p.kind, Name: p.name, Addr: p.addr, Pid: p.pid, Started: p.started, Log: p.LogPath()}
}

// record is the content of a pid file: enough to find, check, stop and
// probe a server from another process.
type record struct {
	Kind    Kind   `json:"kind"`
	Name    string `json:"name"`
	Addr    string `json:"addr"`
	Pid     int    `json:"pid"`
	Started uint64 `json:"started"` // /proc/PID/stat starttime, to detect pid reuse
	Log     string `json:"log"`
	dir     string
}

func (r record) alive() bool {
	state, started, err := processStat(r.Pid)
	return err == nil && started == r.Started && state != 'Z' && state != 'X'
}

func (r record) paused() bool {
	state, _, err := processStat(r.Pid)
	return err == nil && state == 'T'
}

func readRecord(dir string) (record, error) {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return record{}, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return record{}, fmt.Errorf("servers: bad pid file %s: %w", filepath.Join(dir, pidFile), err)
	}
	r.dir = dir
	return r, nil
}

func writeRecord(dir string, r record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, pidFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, pidFile))
}
