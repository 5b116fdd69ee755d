package engine

import "testing"

func TestCountCPUList(t *testing.T) {
	for s, want := range map[string]int{"0": 1, "0-3": 4, "0-3,8,10-11": 7, "": 0, "x": 0, "3-1": 0, "0-": 0} {
		if got := countCPUList(s); got != want {
			t.Errorf("countCPUList(%q) = %d, want %d", s, got, want)
		}
	}
	if hostCPUs() < 1 {
		t.Errorf("hostCPUs() = %d on this host", hostCPUs())
	}
}

// TestOutnumber: ranks yield their cores only when they must share them,
// and a rank bound to a core of its own does not.
func TestOutnumber(t *testing.T) {
	for _, c := range []struct {
		ranks, mine, host int
		want              bool
	}{
		{2, 2, 2, false},  // 2 ranks, unbound, 2 cores
		{4, 2, 2, true},   // 4 ranks on 2 cores (CI)
		{2, 1, 16, false}, // mpirun: each rank bound to a core of 16
		{2, 1, 2, false},  // mpirun on 2 cores
		{4, 1, 2, true},   // mpirun --oversubscribe: 4 ranks bound on 2 cores
		{3, 8, 16, true},  // three sets of 8 cannot be apart on 16
		{4, 2, 0, true},   // host unknown: the process's CPUs
	} {
		if got := outnumber(c.ranks, c.mine, c.host); got != c.want {
			t.Errorf("outnumber(%d ranks, %d of %d CPUs) = %v, want %v", c.ranks, c.mine, c.host, got, c.want)
		}
	}
}
