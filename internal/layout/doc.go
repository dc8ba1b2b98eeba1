// Package layout holds the tests of the module's shape, which no one
// package can see: the public surface (what a user can import, and how
// much of it), the weight of the worker SDK and the API client, and the
// layering of packages. It has no code of its own.
package layout
