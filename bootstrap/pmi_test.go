//go:build unix && !mpi

// Detect from the environment alone: a -tags mpi build asks MPI instead.

package bootstrap

import (
	"bufio"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// fakePMI answers PMI-1 commands on c the way MPICH's Hydra does, with
// answers overriding the replies by command; it returns the commands it
// was sent.
func fakePMI(c net.Conn, answers map[string]string) <-chan []string {
	got := make(chan []string, 1)
	go func() {
		defer c.Close()
		var cmds []string
		defer func() { got <- cmds }()
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			cmd := strings.TrimSpace(line)
			cmds = append(cmds, cmd)
			name, _, _ := strings.Cut(strings.TrimPrefix(cmd, "cmd="), " ")
			reply, ok := answers[name]
			if !ok {
				reply = map[string]string{
					"init":           "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0",
					"get_my_kvsname": "cmd=my_kvsname kvsname=kvs_17624_0_1015286206_vm",
					"finalize":       "cmd=finalize_ack",
				}[name]
			}
			if reply == "" {
				return
			}
			c.Write([]byte(reply + "\n"))
			if name == "finalize" {
				return
			}
		}
	}()
	return got
}

// pmiFD returns a descriptor for Detect to find in PMI_FD, and the other
// end of its connection.
func pmiFD(t *testing.T) (string, net.Conn) {
	t.Helper()
	pmiCache.Lock()
	pmiCache.fd, pmiCache.id, pmiCache.err = "", "", nil
	pmiCache.Unlock()
	c1, c2 := socketPair(t)
	f, err := c1.(*net.UnixConn).File()
	c1.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() }) // Detect leaves PMI_FD open
	return strconv.Itoa(int(f.Fd())), c2
}

func TestDetectMPICHJobID(t *testing.T) {
	fd, server := pmiFD(t)
	got := fakePMI(server, nil)
	setEnv(t, map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2", "PMI_FD": fd})
	job, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	if job.JobID != "kvs_17624_0_1015286206_vm" || job.Key != derivedKey("mpich", job.JobID) {
		t.Errorf("Detect = JobID %q, Key %q", job.JobID, job.Key)
	}
	cmds := <-got
	want := []string{"cmd=init pmi_version=1 pmi_subversion=1", "cmd=get_my_kvsname", "cmd=finalize"}
	if strings.Join(cmds, "|") != strings.Join(want, "|") {
		t.Errorf("the process manager was sent %q, want %q", cmds, want)
	}
	// Asked once: a second Detect does not talk to the process manager
	// again, after finalize.
	if again, err := Detect(); err != nil || again.JobID != job.JobID {
		t.Errorf("second Detect = %q, %v", again.JobID, err)
	}

	// COURIER_JOB_KEY still wins over the derived key.
	fd, server = pmiFD(t)
	fakePMI(server, nil)
	setEnv(t, map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2", "PMI_FD": fd, "COURIER_JOB_KEY": "s3cret"})
	if job, err := Detect(); err != nil || job.Key != "s3cret" || job.JobID == "" {
		t.Errorf("Detect = %+v, %v", job, err)
	}
}

func TestDetectMPICHJobIDErrors(t *testing.T) {
	for name, c := range map[string]struct {
		answers map[string]string
		text    string
	}{
		"init fails":      {map[string]string{"init": "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1"}, "rc=-1"},
		"no kvsname":      {map[string]string{"get_my_kvsname": "cmd=my_kvsname"}, "without a kvsname"},
		"wrong answer":    {map[string]string{"get_my_kvsname": "cmd=barrier_out"}, "want cmd=my_kvsname"},
		"hangs up":        {map[string]string{"finalize": ""}, "EOF"},
		"not a socket fd": {nil, "not a socket"},
	} {
		t.Run(name, func(t *testing.T) {
			fd, server := pmiFD(t)
			if c.answers != nil {
				fakePMI(server, c.answers)
			} else {
				server.Close()
				file, err := os.CreateTemp(t.TempDir(), "notasocket")
				if err != nil {
					t.Fatal(err)
				}
				defer file.Close()
				fd = strconv.Itoa(int(file.Fd()))
			}
			setEnv(t, map[string]string{"PMI_RANK": "0", "PMI_SIZE": "2", "PMI_FD": fd})
			_, err := Detect()
			wantErr(t, name, err, []error{ErrBadEnv}, "PMI_RANK=0 PMI_SIZE=2", "PMI_FD="+fd, c.text)
		})
	}
	// With COURIER_ADDR, the rendezvous needs no job ID: no error.
	fd, server := pmiFD(t)
	fakePMI(server, map[string]string{"init": "cmd=response_to_init rc=1"})
	setEnv(t, map[string]string{"PMI_RANK": "0", "PMI_SIZE": "2", "PMI_FD": fd, "COURIER_ADDR": "127.0.0.1:4444"})
	if job, err := Detect(); err != nil || job.JobID != "" {
		t.Errorf("Detect with COURIER_ADDR = %+v, %v", job, err)
	}
	// One rank, or a job ID in the environment: PMI_FD is not used.
	for _, vars := range []map[string]string{
		{"PMI_RANK": "0", "PMI_SIZE": "1", "PMI_FD": "1000000"},
		{"PMI_RANK": "0", "PMI_SIZE": "2", "PMI_FD": "1000000", "PMI_KVSNAME": "kvs_1"},
	} {
		setEnv(t, vars)
		if _, err := Detect(); err != nil {
			t.Errorf("Detect with %v: %v", vars, err)
		}
	}
}
