// Package functionstest tests the ServoCallbacks Cloud Function entry
// point (package functions) in a process of its own: the function builds
// its dependencies once per process, so the unconfigured case needs a
// fresh one.
package functionstest
