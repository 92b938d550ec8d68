//go:build !unix

package main

import "github.com/rs/zerolog"

func checkFileLimit(zerolog.Logger) {}
