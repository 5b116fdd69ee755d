package backend

import (
	"slices"
	"sync"
)

var (
	regMu   sync.RWMutex
	drivers = map[string]Driver{}
)

// Register makes a driver available under name. It panics if name is empty,
// d is nil, or name is taken, like database/sql.Register: these are
// programming errors found at init time.
func Register(name string, d Driver) {
	if name == "" {
		panic("backend: Register with an empty name")
	}
	if d == nil {
		panic("backend: Register driver is nil")
	}
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := drivers[name]; dup {
		panic("backend: Register called twice for driver " + name)
	}
	drivers[name] = d
}

// Lookup returns the driver registered under name.
func Lookup(name string) (Driver, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	d, ok := drivers[name]
	return d, ok
}

// Drivers returns the registered names, sorted.
func Drivers() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(drivers))
	for n := range drivers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
