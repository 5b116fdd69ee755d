// Package proctest runs the conformance suite (package conformance) with
// every rank a separate OS process, as real jobs run: under mpirun,
// mpiexec, courier run or srun, on one host or several, or started by the
// package's own test.
//
// # Design
//
// One job runs the whole suite: a launcher starts each process once (and
// courier run hands rank 0 its rendezvous socket once), so a job per case
// would work only where the test starts the processes itself. Each rank
// first joins a control communicator with mp.Init from its environment
// (whatever launcher started it), always over the TCP backend and with
// envelope checks off: it is the harness, not the code under test. Then,
// for each case in order:
//
//  1. Rank 0 listens on a fresh port, on the host of COURIER_ADDR (loopback
//     when that is unset: the ranks are then on one host), and sends the
//     address and a fresh job key to every other rank over the control
//     communicator.
//  2. Every rank calls mp.Init with that job (mp.WithJob; rank, size and
//     local rank are the launcher's) and otherwise its environment
//     (COURIER_BACKEND, COURIER_IFACE, COURIER_CHECK, ...), with
//     mp.WithTimeout(20s) unless COURIER_TIMEOUT is set; runs the case's
//     body with a conformance.T that records failures (a ranktest.T); and
//     closes the communicator.
//  3. Every rank sends its verdict to rank 0 over the control communicator;
//     rank 0 prints one line per case ("PASS name", "FAIL name: rank r:
//     detail" per failing rank, or "SKIP name: reason") and sends the
//     list of failing ranks back, so that the case's subtest fails on
//     every rank when it failed on any.
//
// The case communicators are independent of the control one, so a case
// may close or abort its own (Errors/Close, Errors/Abort, Errors/PeerLost)
// and the agreement still runs. Nothing waits without a bound: the case
// communicators have their timeout, a watchdog aborts a case body that
// outlives it by far, and the control communicator's timeout is longer
// than a case can take. A rank that crashes, or whose control
// communicator fails, stops, and closes that communicator if it can; the
// others then see it lost at their next control step and stop too, so one
// failing rank never hangs the rest. Launch counts every case that rank 0
// did not report as failed.
//
// # Running it
//
// TestConformanceProcesses, in this package's tests, starts the ranks
// itself (4 by default, on loopback) when it is not a rank of a job
// (InJob); started by a launcher, each copy of the test binary is a rank:
//
//	go test -c -o proctest.test ./internal/conformance/proctest
//	mpirun --oversubscribe -np 2 ./proctest.test -test.run TestConformanceProcesses
//	mpiexec.mpich -np 3 ./proctest.test -test.run TestConformanceProcesses
//	courier run -np 4 ./proctest.test -test.run TestConformanceProcesses
//
// On several hosts, give every rank COURIER_ADDR=host:port of rank 0
// (mpirun -x COURIER_ADDR) and, where needed, COURIER_IFACE. With the NCCL
// backend: mpirun -np 2 -x COURIER_BACKEND=nccl -x NCCL_NVLS_ENABLE=0 ...
//
// COURIER_CASES (or the test's -cases flag) selects cases by a regular
// expression matched against their names, unanchored as with go test -run;
// every rank must see the same value (mpirun -x COURIER_CASES, or the
// flag, which every rank gets).
package proctest
