package actors

import (
	"os/exec"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors/sysprompt"
)

// contextReady carries the system prompt a turn gathered off the actor
// (AGENTS.md stat and read, git status bounded by sysprompt.GitTimeout).
type contextReady struct {
	stable, turn string
}

func (*contextReady) IgnoreDeadLetterLogging() {}

// gatherContext builds the turn's system prompt in a goroutine and sends
// it back as contextReady; the actor stays free (a cancel ends the turn
// at once, and the prompt it would have used is dropped).
func (t *turn) gatherContext(ctx actor.Context) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	proj := t.deps.projects.For(t.cwd)
	runCtx, cwd, mode, subagent, log := t.ctx, t.cwd, t.mode, t.subagent, t.log
	var start sysprompt.Starter
	if jail := t.jail; jail != nil {
		// git may run programs the repository's config names (filter
		// drivers): it runs contained like the model's commands, reading
		// the repository root above the cwd.
		start = func(cmd *exec.Cmd) error { return jail.Start(cmd, nil, cmd.Dir) }
	}
	go func() {
		defer func() {
			if r := recover(); r != nil {
				root.Send(self, &goroutinePanic{p: recovered(r)})
			}
		}()
		in := refreshInstructions(proj, log)
		env := sysprompt.Gather(runCtx, cwd, in.Root, in.Git, sysprompt.GitTimeout, start)
		root.Send(self, &contextReady{stable: sysprompt.Stable(in), turn: sysprompt.Turn(env, mode, subagent)})
	}()
}

// refreshInstructions re-reads the project's AGENTS.md files if they
// changed, and says at debug level which files the model gets.
func refreshInstructions(proj *sysprompt.Project, log zerolog.Logger) *sysprompt.Instructions {
	in, changed := proj.Refresh()
	if changed && log.Debug().Enabled() {
		var cut, skipped []string
		for _, f := range in.Files {
			if f.Cut {
				cut = append(cut, f.Path)
			}
		}
		for _, s := range in.Skipped {
			skipped = append(skipped, s.Path+": "+s.Reason)
		}
		log.Debug().Str("root", in.Root).Strs("files", in.Paths()).Strs("cut", cut).Strs("skipped", skipped).
			Msg("project instructions loaded")
	}
	return in
}

// prefetchInstructions reads the session's AGENTS.md files in the
// background when it opens, so that what loadedInstructions reports (and
// the debug log) is there before the first prompt.
func (s *session) prefetchInstructions() {
	proj, log := s.deps.projects.For(s.meta.Cwd), s.log
	go refreshInstructions(proj, log)
}

// loadedInstructions are the AGENTS.md files the model is given in this
// session (Paths in order, Files with Cut, Skipped with reasons), as of
// the last prompt or the session's start; nil before they were first
// read. For /status. The value is never modified (a change makes a new
// one).
func (s *session) loadedInstructions() *sysprompt.Instructions {
	return s.deps.projects.For(s.meta.Cwd).Loaded()
}
