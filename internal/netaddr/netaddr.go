// Package netaddr resolves COURIER_IFACE, the interface or address a
// courier process listens on, for the bootstrap rendezvous and the TCP
// backend alike. A value that names nothing usable on this host is an
// error that says what the host has, so a mistyped interface fails at
// once, by name, instead of as a connection that never comes.
package netaddr

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ErrIface reports a COURIER_IFACE that names no usable interface or
// address of this host. The error that wraps it names the value and lists
// the host's interfaces.
var ErrIface = errors.New("bad " + Var)

// Var is the environment variable Resolve's value comes from; errors name it.
const Var = "COURIER_IFACE"

// Resolve returns the host (an IP address, for net.JoinHostPort) to listen
// on for the value of COURIER_IFACE:
//
//   - an IP address (an IPv6 one may carry a zone, "fe80::1%eth0") must be
//     loopback, unspecified (0.0.0.0, ::), or assigned to an interface of
//     this host; it is returned as given;
//   - otherwise value is an interface name: the interface must exist, be up
//     and have an address; its first IPv4 address is returned, else its
//     first IPv6 address that is not link-local.
//
// Surrounding spaces are ignored. Errors wrap ErrIface, name the value,
// and list the host's interfaces with their addresses.
func Resolve(value string) (string, error) {
	v := strings.TrimSpace(value)
	if v == "" {
		return "", fail(value, "empty value")
	}
	if ip, err := netip.ParseAddr(v); err == nil {
		return resolveIP(value, ip)
	}
	ifi, err := net.InterfaceByName(v)
	if err != nil {
		return "", fail(value, "no such interface, and not an IP address")
	}
	if ifi.Flags&net.FlagUp == 0 {
		return "", fail(value, "the interface is down")
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return "", fail(value, "cannot read the interface's addresses: "+err.Error())
	}
	var v6 string
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if n.IP.To4() != nil {
			return n.IP.String(), nil
		}
		if v6 == "" && !n.IP.IsLinkLocalUnicast() {
			v6 = n.IP.String()
		}
	}
	if v6 != "" {
		return v6, nil
	}
	if len(addrs) == 0 {
		return "", fail(value, "the interface has no address")
	}
	return "", fail(value, "the interface has only link-local addresses: give one of them with its zone instead, e.g. fe80::1%"+v)
}

// resolveIP checks that ip is an address this host can listen on.
func resolveIP(value string, ip netip.Addr) (string, error) {
	if ip.IsLoopback() || ip.IsUnspecified() {
		return ip.String(), nil
	}
	bare := ip.WithZone("").Unmap()
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", fail(value, "cannot list this host's interfaces: "+err.Error())
	}
	for _, ifi := range ifaces {
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if have, ok := netip.AddrFromSlice(n.IP); ok && have.Unmap() == bare {
				return ip.String(), nil
			}
		}
	}
	return "", fail(value, "not an address of this host")
}

// fail builds Resolve's error.
func fail(value, why string) error {
	return fmt.Errorf("%w %q: %s (this host has: %s)", ErrIface, value, why, Interfaces())
}

// Interfaces describes this host's interfaces and their addresses, e.g.
// "lo (up: 127.0.0.1, ::1), eth0 (up: 192.0.2.2), eth1 (down, no address)",
// for error messages.
func Interfaces() string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "cannot list the interfaces: " + err.Error()
	}
	if len(ifaces) == 0 {
		return "no interfaces"
	}
	parts := make([]string, 0, len(ifaces))
	for _, ifi := range ifaces {
		state := "down"
		if ifi.Flags&net.FlagUp != 0 {
			state = "up"
		}
		var ips []string
		if addrs, err := ifi.Addrs(); err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					ips = append(ips, n.IP.String())
				}
			}
		}
		if len(ips) == 0 {
			parts = append(parts, ifi.Name+" ("+state+", no address)")
		} else {
			parts = append(parts, ifi.Name+" ("+state+": "+strings.Join(ips, ", ")+")")
		}
	}
	return strings.Join(parts, ", ")
}
