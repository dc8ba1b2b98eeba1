// Package openapi holds the OpenAPI 3.1 description of Servo's control
// API, callbacks and claim (docs/openapi.yaml) as the JSON that GET
// /v1/openapi.json serves.
//
// openapi.json is generated from docs/openapi.yaml (go generate; the
// package's tests fail when the two disagree), and the tests hold the
// document to the handlers: every route it describes is served and every
// route served is described, and its schemas have exactly the fields of
// the api package's types.
package openapi

//go:generate go test -run ^TestJSONIsTheDocument$ -update .

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
	"time"
)

//go:embed openapi.json
var doc []byte

// etag identifies the document's version.
var etag = func() string {
	sum := sha256.Sum256(doc)
	return `"` + hex.EncodeToString(sum[:8]) + `"`
}()

// JSON returns the document as JSON.
func JSON() []byte { return bytes.Clone(doc) }

// Handler serves the document as application/json, with an ETag (and 304
// to a matching If-None-Match) and HEAD.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(doc))
	})
}
