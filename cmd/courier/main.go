// Command courier is courier's command line: it runs a program as a local
// multi-rank job (courier run), reports what this machine offers (courier
// info), measures the transports (courier bench, courier plot), and
// merges and draws the ranks' timelines (courier trace).
//
// Usage:
//
//	courier <command> [arguments]
//
// Run "courier help" for the commands, "courier help <command>" for one.
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
)

// version is courier's version, as courier version prints it.
const version = "v0.1.0-dev"

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run is the whole command line: args as in os.Args (program name first),
// output to stdout and stderr; it returns the exit code. Signals come from
// the process (SIGINT and SIGTERM, for courier run).
func run(args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr, signals: notifySignals}
	return a.main(args[1:])
}

// notifySignals subscribes to SIGINT and SIGTERM; stop unsubscribes.
func notifySignals() (sigs <-chan os.Signal, stop func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	return ch, func() { signal.Stop(ch) }
}

// app is what commands need from outside: where to write, and how to
// receive signals. Tests substitute their own.
type app struct {
	stdout, stderr io.Writer
	signals        func() (<-chan os.Signal, func())
}

// command is a subcommand of courier.
type command struct {
	// summary is the one line shown in courier's usage.
	summary string
	// run runs the command with the arguments that follow its name and
	// returns the exit code (2 for a usage error).
	run func(a *app, args []string) int
}

// commands is courier's table of subcommands. To add one, add an entry.
// (A function, not a variable, because help refers back to it.)
func commands() map[string]command {
	return map[string]command{
		"bench":   {"measure point-to-point latency and bandwidth between two ranks", (*app).bench},
		"help":    {"show help for courier or one of its commands", (*app).help},
		"info":    {"show what this machine offers: launcher, backends, GPUs, NCCL", (*app).info},
		"plot":    {"draw and tabulate courier bench and MPI runs from their JSON files", (*app).plot},
		"run":     {"run a program as N ranks on this machine", (*app).runJob},
		"trace":   {"merge the ranks' timelines (COURIER_TRACE) and draw them", (*app).traceCmd},
		"version": {"print courier's version", (*app).version},
	}
}

func (a *app) main(args []string) int {
	if len(args) == 0 {
		a.usage(a.stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		return a.help(nil)
	case "-version", "--version":
		return a.version(nil)
	}
	cmd, ok := commands()[name]
	if !ok {
		fmt.Fprintf(a.stderr, "courier: unknown command %q\n\n", name)
		a.usage(a.stderr)
		return 2
	}
	return cmd.run(a, args[1:])
}

// usage writes courier's top-level usage to w.
func (a *app) usage(w io.Writer) {
	cmds := commands()
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range cmds {
			if !yield(n) {
				return
			}
		}
	})
	var b strings.Builder
	b.WriteString("courier is MPI-style message passing for Go.\n\nUsage:\n\n\tcourier <command> [arguments]\n\nCommands:\n\n")
	for _, n := range names {
		fmt.Fprintf(&b, "\t%-8s %s\n", n, cmds[n].summary)
	}
	b.WriteString("\nRun \"courier help <command>\" for more about a command.\n")
	io.WriteString(w, b.String())
}

// help is courier help [command].
func (a *app) help(args []string) int {
	switch len(args) {
	case 0:
		a.usage(a.stdout)
		return 0
	case 1:
		switch args[0] {
		case "run":
			io.WriteString(a.stdout, runUsage)
			return 0
		case "bench":
			io.WriteString(a.stdout, benchUsage)
			return 0
		case "info":
			io.WriteString(a.stdout, infoUsage)
			return 0
		case "plot":
			io.WriteString(a.stdout, plotUsage)
			return 0
		case "trace":
			io.WriteString(a.stdout, traceUsage)
			return 0
		case "help", "version":
			fmt.Fprintf(a.stdout, "usage: courier %s\n\n%s.\n", args[0], commands()[args[0]].summary)
			return 0
		}
		if _, ok := commands()[args[0]]; ok {
			fmt.Fprintf(a.stdout, "courier %s: %s\n", args[0], commands()[args[0]].summary)
			return 0
		}
		fmt.Fprintf(a.stderr, "courier help: unknown command %q\n\n", args[0])
	}
	a.usage(a.stderr)
	return 2
}

// version is courier version.
func (a *app) version(args []string) int {
	if len(args) > 0 {
		fmt.Fprintln(a.stderr, "usage: courier version")
		return 2
	}
	fmt.Fprintf(a.stdout, "courier %s %s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
