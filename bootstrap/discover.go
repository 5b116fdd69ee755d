package bootstrap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Discovery by file: a job started by mpirun, mpiexec or srun, with no
// COURIER_ADDR, meets on one host through a file. Rank 0 listens on a free
// port (loopback, or COURIER_IFACE) and publishes host:port in
//
//	<os.TempDir()>/courier-<uid>/<launcher>-<job ID>.addr
//
// (written through a rename, mode 0600, in a directory of mode 0700 that
// the user owns); the other ranks read it until they are admitted. The
// handshake is authenticated with the key derived from the job ID, so a
// file left behind by an earlier job with the same ID names a port that
// either nobody listens on or a rendezvous of another job refuses: the
// ranks then read the file again, until ctx ends.

const (
	// attemptTimeout bounds one handshake with the address in the file: a
	// stale file may name a port that something else now holds, silently.
	attemptTimeout = 10 * time.Second
	// maxIDLen is the longest job ID kept whole in a file name.
	maxIDLen = 64
	// maxAddrFile bounds what a reader takes from the file.
	maxAddrFile = 512
)

// jobIDVars says where each launcher that discovery serves keeps its job
// ID, for error messages.
var jobIDVars = map[string]string{
	"openmpi": "OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE",
	"mpich":   "PMI_KVSNAME or PMI_JOBID, or the KVS name asked over PMI_FD",
	"pmix":    "PMIX_NAMESPACE",
	"slurm":   "SLURM_JOB_ID",
	"flux":    "FLUX_JOB_ID",
	"jsrun":   "LSB_JOBID",
}

// discoverable reports whether the ranks of a launch by launcher can meet
// through the address file.
func discoverable(launcher string) bool {
	_, ok := jobIDVars[launcher]
	return ok
}

// defaultRunDir is the directory of the address files: courier-<uid> under
// os.TempDir(), one per user.
func defaultRunDir() string {
	name := "courier"
	if uid := os.Getuid(); uid >= 0 {
		name += "-" + strconv.Itoa(uid)
	}
	return filepath.Join(os.TempDir(), name)
}

// addrFileName is the name of the address file of a job: the launcher and
// the job ID, with every byte outside [A-Za-z0-9._-] replaced by '_'. A job
// ID that needed replacing, or is longer than maxIDLen, is cut to 40 bytes
// and followed by a hash of the whole ID, so that distinct IDs never share
// a file.
func addrFileName(launcher, jobID string) string {
	id := sanitizeName(jobID)
	if id != jobID || len(id) > maxIDLen {
		sum := sha256.Sum256([]byte(jobID))
		id = id[:min(len(id), 40)] + "-" + hex.EncodeToString(sum[:8])
	}
	return sanitizeName(launcher) + "-" + id + ".addr"
}

// sanitizeName replaces every byte outside [A-Za-z0-9._-] by '_'.
func sanitizeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

// rendezvousErr is an error that matches ErrNoRendezvous but says more
// precisely what to do.
type rendezvousErr struct{ msg string }

func (e *rendezvousErr) Error() string        { return e.msg }
func (e *rendezvousErr) Is(target error) bool { return target == ErrNoRendezvous }

// several is the advice for ranks that are on several hosts.
const several = "set COURIER_ADDR=host:port reachable from every host (the address rank 0 listens on, " +
	"the same on every rank), or build with -tags mpi"

// discover runs Connect for a launch by mpirun, mpiexec or srun without
// COURIER_ADDR: the ranks meet through the address file in dir. iface is
// the host rank 0 listens on ("" for loopback).
func discover(ctx context.Context, job Job, key, dir, iface string) (Exchanger, error) {
	switch {
	case job.LocalSize > 0 && job.LocalSize < job.Size:
		return nil, &rendezvousErr{fmt.Sprintf("bootstrap: the %d ranks are on several hosts (%d on this one; %s): "+
			"they cannot find each other on their own: %s", job.Size, job.LocalSize, job.said(), several)}
	case job.JobID == "":
		return nil, &rendezvousErr{fmt.Sprintf("%v: the launcher gave no job ID (%s unset), "+
			"so the ranks cannot find rank 0's address file (%s)", ErrNoRendezvous, jobIDVars[job.Launcher], job.said())}
	}
	path := filepath.Join(dir, addrFileName(job.Launcher, job.JobID))
	if job.Rank == 0 {
		return exchanger(publish(ctx, job, key, dir, path, iface))
	}
	return exchanger(find(ctx, job, key, dir, path))
}

// publish is rank 0's side of discover: it listens, publishes the address
// and serves the rendezvous; the file is removed once rank 0 stops
// listening (every rank joined, or it gave up).
func publish(ctx context.Context, job Job, key, dir, path, iface string) (*server, error) {
	host := iface
	if host == "" {
		host = "127.0.0.1"
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("bootstrap: rank 0 cannot listen for the rendezvous on %s: %w", host, err)
	}
	addr := *ln.Addr().(*net.TCPAddr)
	if addr.IP.IsUnspecified() { // COURIER_IFACE=0.0.0.0 or ::; readers are on this host
		if addr.IP.To4() != nil {
			addr.IP = net.IPv4(127, 0, 0, 1)
		} else {
			addr.IP = net.IPv6loopback
		}
	}
	published := addr.String()
	if err := writeAddrFile(dir, path, published); err != nil {
		ln.Close()
		return nil, err
	}
	defer removeAddrFile(path, published)
	job.Listener = ln
	s, err := serve(ctx, job, key)
	if err != nil && errors.Is(err, ErrPeerLost) && ctx.Err() != nil {
		err = fmt.Errorf("%w; rank 0 published %s in %s, and ranks on other hosts cannot read it: "+
			"if the ranks are on several hosts, %s", err, published, path, several)
	}
	return s, err
}

// find is the side of discover of a rank other than 0: it reads rank 0's
// address from the file and joins, reading the file again after every
// failure but a refusal by rank 0 of this very job, until ctx ends.
func find(ctx context.Context, job Job, key, dir, path string) (*client, error) {
	pause := firstBackoff
	var (
		last     error  // why the last attempt failed
		lastAddr string // the address it tried, if any
	)
	for {
		addr, err := readAddrFile(dir, path)
		if err != nil {
			last = err
		} else {
			lastAddr = addr
			c, err := tryJoin(ctx, job, key, addr)
			if err == nil {
				return c, nil
			}
			if _, other := errors.AsType[*otherJob](err); errors.Is(err, ErrRefused) && !other && ctx.Err() == nil {
				return nil, err // rank 0 of this job turned us away: a broken launch
			}
			last = err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, findErr(ctx, job, path, lastAddr, last)
		}
		pause = min(2*pause, maxBackoff)
	}
}

// findErr explains why find gave up.
func findErr(ctx context.Context, job Job, path, addr string, last error) error {
	what := "rank 0 never published its rendezvous address in " + path
	if addr != "" {
		what = fmt.Sprintf("rank 0's rendezvous at %s (read from %s) did not admit this rank", addr, path)
	}
	return fmt.Errorf("bootstrap: rank %d: %s: %w (last attempt: %v; %s); "+
		"if rank 0 runs on another host, %s", job.Rank, what, context.Cause(ctx), last, job.said(), several)
}

// tryJoin makes one attempt to join rank 0 at addr.
func tryJoin(ctx context.Context, job Job, key, addr string) (*client, error) {
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(actx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return attach(actx, conn, job, key, addr)
}

// checkDir makes sure the directory of the address files is a directory
// (not a link to one) that only this user can write to (checkOwner, where
// the platform can tell): otherwise another user could point the ranks at
// a rendezvous of their own.
func checkDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return checkOwner(dir, fi)
}

// writeAddrFile publishes addr in path, atomically: readers see the whole
// address or no file (or an older one).
func writeAddrFile(dir, path, addr string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("bootstrap: rank 0 cannot create the rendezvous directory: %w", err)
	}
	if err := checkDir(dir); err != nil {
		return fmt.Errorf("bootstrap: rank 0 cannot publish its address in %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*") // mode 0600
	if err != nil {
		return fmt.Errorf("bootstrap: rank 0 cannot publish its address: %w", err)
	}
	_, err = io.WriteString(f, addr+"\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("bootstrap: rank 0 cannot publish its address in %s: %w", path, err)
	}
	return nil
}

// removeAddrFile removes path if it still holds addr (a later job with
// the same ID may have replaced it).
func removeAddrFile(path, addr string) {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == addr {
		os.Remove(path)
	}
}

// readAddrFile returns the address in path.
func readAddrFile(dir, path string) (string, error) {
	if err := checkDir(dir); err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAddrFile))
	if err != nil {
		return "", err
	}
	addr := strings.TrimSpace(string(b))
	if host, port, err := net.SplitHostPort(addr); err != nil || host == "" || port == "" {
		return "", fmt.Errorf("%s holds %q, not host:port", path, addr)
	}
	return addr, nil
}
