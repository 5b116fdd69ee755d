package bootstrap

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzAddrFile reads arbitrary address files, as rank 0 (or whatever
// wrote the file) left them: reading never panics and takes at most
// maxAddrFile bytes; what it returns is the file's text, trimmed, and a
// host:port with both parts; anything else is refused as not host:port.
// An address rank 0 writes reads back as it was written.
func FuzzAddrFile(f *testing.F) {
	f.Add([]byte("127.0.0.1:4444\n"))
	f.Add([]byte("[::1]:5555"))
	f.Add([]byte("node7.cluster:40123\r\n"))
	f.Add([]byte(":80\n"))
	f.Add([]byte("garbage\n"))
	f.Add([]byte(strings.Repeat("a", maxAddrFile) + ":1"))
	dir := filepath.Join(f.TempDir(), "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(dir, addrFileName("openmpi", "1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		addr, err := readAddrFile(dir, path)
		if err != nil {
			if !strings.Contains(err.Error(), "not host:port") {
				t.Fatalf("readAddrFile: %v", err)
			}
			return
		}
		if want := strings.TrimSpace(string(data[:min(len(data), maxAddrFile)])); addr != want {
			t.Fatalf("read %q from a file holding %q", addr, want)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" || port == "" {
			t.Fatalf("took %q for host:port (%v)", addr, err)
		}
		if err := writeAddrFile(dir, path, addr); err != nil {
			t.Fatal(err)
		}
		if back, err := readAddrFile(dir, path); err != nil || back != addr {
			t.Fatalf("wrote %q, read back %q, %v", addr, back, err)
		}
	})
}
