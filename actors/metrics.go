package actors

import "sync/atomic"

// Metrics are live counters of the actor tree. Edges export them (the HTTP
// edge as Prometheus gauges); the actors only count.
type Metrics struct {
	Connections  atomic.Int64
	Sessions     atomic.Int64
	RunningTurns atomic.Int64
	RunningTools atomic.Int64
	// FramesOut counts every frame handed to an outlet.
	FramesOut atomic.Int64
	// TurnsPaused counts the turns paused for another process to resume
	// (Server.PauseTurns); TurnsResumed the turns of another process
	// resumed here (Server.Adopt, or a session opened with a turn left
	// recorded in it).
	TurnsPaused  atomic.Int64
	TurnsResumed atomic.Int64
	// TurnsInterrupted counts the turns recorded interrupted here: their
	// process died and no other could resume them (the file store).
	TurnsInterrupted atomic.Int64
}
