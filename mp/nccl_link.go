package mp

// The nccl backend registers itself here, so COURIER_BACKEND=nccl (and
// "auto" on a machine with GPUs) works in every program that uses mp.
import _ "github.com/courier-mp/courier/backend/nccl"
