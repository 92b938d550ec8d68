//go:build !linux

package sandbox

import (
	"errors"
	"runtime"
)

func landlockABI() (int, string) {
	return 0, "Landlock is a Linux feature (this is " + runtime.GOOS + ")"
}

type ruleset struct{}

func newRuleset(Policy) (*ruleset, error) { return nil, errors.New("sandbox: Landlock is Linux only") }
func (*ruleset) close()                   {}
func (*ruleset) enforce(func() error) error {
	return errors.New("sandbox: Landlock is Linux only")
}
