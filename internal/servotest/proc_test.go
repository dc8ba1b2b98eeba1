package servotest

import (
	"os"
	"syscall"
	"testing"
	"time"
)

func TestProcFigures(t *testing.T) {
	for end := time.Now().Add(30 * time.Millisecond); time.Now().Before(end); {
	}
	self := CPUSeconds(os.Getpid())
	if self <= 0 {
		t.Errorf("CPUSeconds(self) = %v after a busy loop", self)
	}
	if g := GroupCPUSeconds(syscall.Getpgrp()); g < self {
		t.Errorf("GroupCPUSeconds(own group) = %v, less than this process's %v", g, self)
	}
	if rss := RSSMiB(os.Getpid()); rss <= 0 {
		t.Errorf("RSSMiB(self) = %v", rss)
	}
	if CPUSeconds(-1) != 0 || RSSMiB(-1) != 0 {
		t.Error("figures for a process that does not exist")
	}
}
