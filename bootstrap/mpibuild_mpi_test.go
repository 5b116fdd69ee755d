//go:build mpi && unix

package bootstrap

// mpiBuild: the tests are built with -tags mpi (TestMain).
const mpiBuild = true
