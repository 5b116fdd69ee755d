package bootstrap

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// pmiTimeout bounds the whole exchange with the process manager.
const pmiTimeout = 5 * time.Second

// pmiCache remembers the answer for a descriptor: pmiJobID closes it, so
// asking twice would talk PMI to a process manager that saw us finalize.
var pmiCache struct {
	sync.Mutex
	fd  string
	id  string
	err error
}

// pmiJobID asks the PMI-1 process manager at the inherited descriptor fd
// (the value of PMI_FD, which MPICH's Hydra sets) for this job's KVS name,
// e.g. "kvs_17624_0_1015286206_vm": the same for every rank of one
// mpiexec, and different for another. It initializes PMI, asks and
// finalizes; a later call with the same fd returns the first answer.
func pmiJobID(fd string) (string, error) {
	pmiCache.Lock()
	defer pmiCache.Unlock()
	if pmiCache.fd == fd && (pmiCache.id != "" || pmiCache.err != nil) {
		return pmiCache.id, pmiCache.err
	}
	id, err := pmiAsk(fd)
	pmiCache.fd, pmiCache.id, pmiCache.err = fd, id, err
	return id, err
}

// pmiAsk runs pmiKVSName on a duplicate of the descriptor fd: the
// descriptor itself is left open, as it is (if PMI_FD is wrong, it may be
// some other file of the program's).
func pmiAsk(fd string) (string, error) {
	n, err := strconv.Atoi(fd)
	if err != nil || n < 0 {
		return "", fmt.Errorf("%q is not a file descriptor", fd)
	}
	c, err := pmiConn(n)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(pmiTimeout))
	return pmiKVSName(c)
}

// pmiKVSName speaks PMI-1's wire protocol (lines of "key=value" words)
// over c: init, get_my_kvsname, finalize.
func pmiKVSName(c net.Conn) (string, error) {
	r := bufio.NewReader(c)
	if _, err := pmiCall(c, r, "cmd=init pmi_version=1 pmi_subversion=1", "response_to_init"); err != nil {
		return "", err
	}
	m, err := pmiCall(c, r, "cmd=get_my_kvsname", "my_kvsname")
	if err != nil {
		return "", err
	}
	name := m["kvsname"]
	if name == "" {
		return "", errors.New("PMI: my_kvsname without a kvsname")
	}
	if _, err := pmiCall(c, r, "cmd=finalize", "finalize_ack"); err != nil {
		return "", err
	}
	return name, nil
}

// pmiCall sends one command line and reads the reply, which must be cmd
// want with rc 0 when it has an rc.
func pmiCall(c net.Conn, r *bufio.Reader, cmd, want string) (map[string]string, error) {
	if _, err := c.Write([]byte(cmd + "\n")); err != nil {
		return nil, fmt.Errorf("PMI: sending %q: %w", cmd, err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("PMI: reading the answer to %q: %w", cmd, err)
	}
	m := map[string]string{}
	for _, word := range strings.Fields(line) {
		k, v, _ := strings.Cut(word, "=")
		m[k] = v
	}
	if m["cmd"] != want {
		return nil, fmt.Errorf("PMI: %q answered %q, want cmd=%s", cmd, strings.TrimSpace(line), want)
	}
	if rc, ok := m["rc"]; ok && rc != "0" {
		return nil, fmt.Errorf("PMI: %q failed: %q", cmd, strings.TrimSpace(line))
	}
	return m, nil
}
