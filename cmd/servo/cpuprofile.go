package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// CPUProfileEnv names the environment variable that makes servo write a
// CPU profile of its whole run to the file it names (for benchmarks such
// as BenchmarkDevWorkload; read it with `go tool pprof`).
const CPUProfileEnv = "SERVO_CPUPROFILE"

// startCPUProfile starts the CPU profile CPUProfileEnv asks for, and
// returns the function that writes it out.
func startCPUProfile() (stop func()) {
	path := os.Getenv(CPUProfileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "servo: "+CPUProfileEnv+":", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
