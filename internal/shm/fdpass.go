package shm

// MaxFds is the most descriptors one message can carry (the kernel's
// SCM_MAX_FD).
const MaxFds = 253
