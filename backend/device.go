package backend

import (
	"fmt"
	"strconv"
	"strings"
)

// DeviceEnv names the variable that picks a rank's GPU (an ordinal)
// instead of its local rank.
const DeviceEnv = "COURIER_DEVICE"

// PickDevice chooses the GPU of the rank cfg describes among the n of its
// host: $COURIER_DEVICE, else the local rank (else the rank, when the
// launcher does not say). Every backend that uses a GPU, and mp's
// Comm.Device, choose with it. The error matches ErrInvalid.
func PickDevice(cfg Config, n int) (int, error) {
	if s := strings.TrimSpace(cfg.Getenv(DeviceEnv)); s != "" {
		d, err := strconv.Atoi(s)
		if err != nil || d < 0 || d >= n {
			return 0, fmt.Errorf("%w: %s=%q: want a device ordinal in [0, %d)", ErrInvalid, DeviceEnv, s, n)
		}
		return d, nil
	}
	lr, what := cfg.Job.LocalRank, "local rank"
	if lr < 0 {
		lr, what = cfg.Job.Rank, "rank (the launcher gives no local rank)"
	}
	if lr >= n {
		return 0, fmt.Errorf("%w: this process is %s %d, but its host has %d GPU(s): run at most one rank per GPU, or set %s",
			ErrInvalid, what, lr, n, DeviceEnv)
	}
	return lr, nil
}
