package netaddr

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// loopback returns this host's loopback interface, or skips the test.
func loopback(t *testing.T) net.Interface {
	t.Helper()
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Skip(err)
	}
	for _, ifi := range ifaces {
		if ifi.Flags&net.FlagLoopback != 0 && ifi.Flags&net.FlagUp != 0 {
			return ifi
		}
	}
	t.Skip("no loopback interface that is up")
	return net.Interface{}
}

func TestResolve(t *testing.T) {
	lo := loopback(t)
	for value, want := range map[string]string{
		"127.0.0.1":   "127.0.0.1",
		" 127.0.0.1 ": "127.0.0.1",
		"127.0.0.2":   "127.0.0.2",
		"::1":         "::1",
		"0.0.0.0":     "0.0.0.0",
		"::":          "::",
		lo.Name:       "127.0.0.1",
	} {
		got, err := Resolve(value)
		if err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", value, got, err, want)
		}
	}
}

// TestResolveHostAddress resolves every address of every interface that is
// up, given as itself.
func TestResolveHostAddress(t *testing.T) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skip(err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLinkLocalUnicast() {
			continue
		}
		if got, err := Resolve(n.IP.String()); err != nil || got != n.IP.String() {
			t.Errorf("Resolve(%q) = %q, %v", n.IP, got, err)
		}
	}
}

func TestResolveErrors(t *testing.T) {
	lo := loopback(t)
	cases := map[string]string{
		"":                    "empty value",
		"no-such-iface0":      "no such interface",
		"eht0":                "no such interface",
		"203.0.113.77":        "not an address of this host",
		"2001:db8::77":        "not an address of this host",
		"127.0.0.1:8080":      "no such interface",
		"fe80::77%nosuchzone": "not an address of this host",
	}
	// An interface that is down, or up without an address, if the host has one.
	if ifaces, err := net.Interfaces(); err == nil {
		for _, ifi := range ifaces {
			addrs, _ := ifi.Addrs()
			switch {
			case ifi.Flags&net.FlagUp == 0:
				cases[ifi.Name] = "the interface is down"
			case len(addrs) == 0:
				cases[ifi.Name] = "the interface has no address"
			}
		}
	}
	for value, why := range cases {
		got, err := Resolve(value)
		if err == nil {
			t.Errorf("Resolve(%q) = %q, want an error", value, got)
			continue
		}
		msg := err.Error()
		if !errors.Is(err, ErrIface) {
			t.Errorf("Resolve(%q): %q does not wrap ErrIface", value, msg)
		}
		for _, want := range []string{`bad COURIER_IFACE "` + value + `": `, why, "this host has: ", lo.Name + " (up: "} {
			if !strings.Contains(msg, want) {
				t.Errorf("Resolve(%q): %q does not say %q", value, msg, want)
			}
		}
	}
}
