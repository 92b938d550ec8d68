package acpserver

import (
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/tools/sandbox"
)

// probeSandbox reads the sandbox settings (flag > IAC_CODE_SANDBOX*) and
// finds what the kernel offers; the log says what is in force: an error
// line when IAC_CODE_SANDBOX=on cannot be honoured (sandboxed tools will
// fail), one warning when auto finds no Landlock (commands run with the
// server's rights).
func probeSandbox(getenv func(string) string, flag, home string, log zerolog.Logger) (sandbox.Status, error) {
	settings, err := sandbox.SettingsFromEnv(getenv, flag, home)
	if err != nil {
		return sandbox.Status{}, err
	}
	st := sandbox.Probe(settings)
	switch {
	case st.Refused():
		log.Error().Str("reason", st.Reason).
			Msg("IAC_CODE_SANDBOX=on but the sandbox cannot be set up: bash and stdio MCP servers will refuse to run")
	case settings.Mode == sandbox.Auto && !st.Active():
		log.Warn().Str("reason", st.Reason).
			Msg("no sandbox: the kernel has no Landlock; bash and stdio MCP servers run with the server's rights")
	case st.Active():
		log.Info().Int("abi", st.ABI).Bool("network", settings.Network).Msg("sandbox: Landlock")
	default:
		log.Info().Msg("sandbox off (IAC_CODE_SANDBOX=off)")
	}
	for _, w := range st.Warnings() {
		log.Warn().Msg("sandbox: " + w)
	}
	return st, nil
}
