//go:build !unix

package acpserver

import "github.com/rs/zerolog"

func checkFileLimit(zerolog.Logger) {}
