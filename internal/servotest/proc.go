package servotest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// USER_HZ, the unit of /proc/PID/stat's CPU times on Linux.
const userHZ = 100

// statFields returns the fields of /proc/PID/stat after the command name,
// or nil: state, ppid, pgrp, …, utime (index 11), stime (12).
func statFields(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return nil
	}
	return f
}

func cpuOf(f []string) float64 {
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / userHZ
}

// CPUSeconds returns a process's CPU time (user + system) so far, in
// seconds; 0 when it is gone.
func CPUSeconds(pid int) float64 {
	if f := statFields("/proc/" + strconv.Itoa(pid) + "/stat"); f != nil {
		return cpuOf(f)
	}
	return 0
}

// GroupCPUSeconds returns the CPU time so far of the live processes of
// process group pgid, in seconds.
func GroupCPUSeconds(pgid int) float64 {
	var total float64
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		if f := statFields(path); f != nil && f[2] == strconv.Itoa(pgid) {
			total += cpuOf(f)
		}
	}
	return total
}

// RSSMiB returns a process's resident memory in MiB; 0 when it is gone.
func RSSMiB(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}
