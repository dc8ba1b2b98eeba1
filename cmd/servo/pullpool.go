package main

import (
	"errors"
	"fmt"
	"strings"
)

// pullPoolFlags collects `servo dev --pull-pool NAME[=SA,...]`: pull pools
// and the identities allowed to claim from them (none: any caller, which
// names itself in the X-Servo-Dev-Identity header, or not at all).
type pullPoolFlags map[string][]string

func (p pullPoolFlags) String() string {
	if len(p) == 0 {
		return ""
	}
	return fmt.Sprint(map[string][]string(p))
}

func (p pullPoolFlags) Set(v string) error {
	name, accounts, _ := strings.Cut(v, "=")
	if name == "" {
		return errors.New("want NAME or NAME=SERVICE_ACCOUNT[,SERVICE_ACCOUNT...]")
	}
	var list []string
	for a := range strings.SplitSeq(accounts, ",") {
		if a = strings.TrimSpace(a); a != "" {
			list = append(list, a)
		}
	}
	p[name] = list
	return nil
}

// Type names the flag's value in help.
func (p pullPoolFlags) Type() string { return "NAME[=SA,...]" }
