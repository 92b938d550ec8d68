//go:build !race

package httpsse

const raceEnabled = false
