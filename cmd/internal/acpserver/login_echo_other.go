//go:build !linux

package acpserver

// hideTyping: elsewhere term.ReadPassword alone turns the echo off.
func hideTyping(int) (restore func()) { return func() {} }
