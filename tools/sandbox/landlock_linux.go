//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

func landlockABI() (int, string) {
	v, err := ll.LandlockGetABIVersion()
	switch {
	case errors.Is(err, syscall.ENOSYS):
		return 0, "the kernel has no Landlock (landlock_create_ruleset: ENOSYS)"
	case errors.Is(err, syscall.EOPNOTSUPP):
		return 0, "Landlock is not enabled at boot (add landlock to the lsm= kernel parameter)"
	case err != nil:
		return 0, "Landlock: " + err.Error()
	case v < 1:
		return 0, fmt.Sprintf("Landlock ABI %d", v)
	}
	return v, ""
}

// ruleset is a Landlock ruleset ready to enforce.
type ruleset struct {
	fd    int
	flags uint32
}

// newRuleset builds the ruleset of p, best effort (what an older kernel
// does not know is not restricted): the file system as Landlock ABI 9
// knows it (connecting to a pathname unix socket outside the writable
// roots included), IPC scopes (signals, abstract unix sockets) always, and
// with the network off TCP (ABI 4) and UDP (ABI 10).
func newRuleset(p Policy) (*ruleset, error) {
	cfg := landlock.Config{HandledAccessFS: landlock.V9.HandledAccessFS, Scoped: landlock.V9.Scoped}
	if !p.Network {
		cfg.HandledAccessNet = landlock.V10.HandledAccessNet
	}
	var rwDirs, rwFiles, rxDirs, rxFiles []string
	split := func(paths []string, dirs, files *[]string) {
		for _, path := range paths {
			if fi, err := os.Stat(path); err == nil && fi.IsDir() {
				*dirs = append(*dirs, path)
			} else if err == nil {
				*files = append(*files, path)
			}
		}
	}
	split(p.ReadWrite, &rwDirs, &rwFiles)
	split(p.ReadExec, &rxDirs, &rxFiles)
	fd, flags, err := cfg.BestEffort().NewRulesetFD(
		landlock.RWDirs(rwDirs...).WithRefer().WithResolveUnix().IgnoreIfMissing(),
		landlock.RWFiles(rwFiles...).WithResolveUnix().IgnoreIfMissing(),
		landlock.RODirs(rxDirs...).IgnoreIfMissing(),
		landlock.ROFiles(rxFiles...).IgnoreIfMissing(),
		landlock.PathAccess(landlock.AccessFSSet(ll.AccessFSReadFile), p.ReadFiles...).IgnoreIfMissing(),
		landlock.RWFiles(p.Devices...).WithIoctlDev().IgnoreIfMissing(),
	)
	if err != nil {
		return nil, fmt.Errorf("sandbox: cannot build the Landlock ruleset: %w", err)
	}
	if fd < 0 {
		return nil, errors.New("sandbox: the kernel has no Landlock")
	}
	return &ruleset{fd: fd, flags: flags}, nil
}

func (r *ruleset) close() {
	if r != nil && r.fd >= 0 {
		_ = syscall.Close(r.fd)
		r.fd = -1
	}
}

// enforce runs start on a new OS thread restricted by r, and destroys the
// thread afterwards: a process start forks from the calling thread, so
// the child (and all it starts) is in the domain, and the rest of the
// server is not. start must only start a process (it runs restricted: it
// may open /dev/null, not the server's files).
func (r *ruleset) enforce(start func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			r.restrictAndStart(start, done)
			return
		}
		// The main thread is the process's leader (/proc/<pid> and
		// signals are checked against its credentials) and the runtime
		// never ends it: keep it, locked to this goroutine, so that the
		// one restricted runs on another thread.
		inner := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			r.restrictAndStart(start, inner)
		}()
		err := <-inner
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

// restrictAndStart restricts the calling goroutine's locked thread and
// runs start there. The thread is never unlocked: the goroutine ends
// locked and the runtime terminates the restricted thread instead of
// reusing it.
func (r *ruleset) restrictAndStart(start func() error, done chan<- error) {
	defer func() {
		if v := recover(); v != nil {
			done <- fmt.Errorf("sandbox: the process start panicked: %v", v)
		}
	}()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		done <- fmt.Errorf("sandbox: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
		return
	}
	if err := ll.LandlockRestrictSelf(r.fd, r.flags); err != nil {
		done <- fmt.Errorf("sandbox: landlock_restrict_self: %w", err)
		return
	}
	done <- start()
}
