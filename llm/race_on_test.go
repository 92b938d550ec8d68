//go:build race

package llm

// raceEnabled: the race detector is on; sync.Pool then drops items at
// random, so the allocation guards do not count.
const raceEnabled = true
