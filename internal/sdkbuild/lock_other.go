//go:build !unix

package sdkbuild

// lock does nothing where flock is missing: builds may then overlap.
func lock(string) (func(), error) { return func() {}, nil }
