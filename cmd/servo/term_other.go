//go:build !unix

package main

import "os"

// termSize reports no terminal where the ioctl is not available.
func termSize(*os.File) (int, bool) { return 0, false }
