package shm

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestIntelCPU: IntelCPU agrees with the vendor the kernel names in
// /proc/cpuinfo (Linux on amd64; elsewhere it is false).
func TestIntelCPU(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		assert.False(t, IntelCPU())
		return
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo to compare with: %v", err)
	}
	var vendor string
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "vendor_id" {
			vendor = strings.TrimSpace(v)
			break
		}
	}
	if vendor == "" {
		t.Skip("/proc/cpuinfo names no vendor_id")
	}
	assert.Equal(t, vendor == "GenuineIntel", IntelCPU(), "vendor_id %q", vendor)
}
