package acpserver

import "golang.org/x/sys/unix"

// hideTyping turns the terminal's echo off before the key's prompt is
// shown: term.ReadPassword turns it off only once called, after the
// prompt, so a key typed (or pasted) as soon as the prompt appeared was
// echoed. The returned func puts the terminal back as it was.
func hideTyping(fd int) (restore func()) {
	was, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return func() {}
	}
	quiet := *was
	quiet.Lflag &^= unix.ECHO
	if unix.IoctlSetTermios(fd, unix.TCSETS, &quiet) != nil {
		return func() {}
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, was) }
}
