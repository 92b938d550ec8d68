package acpserver

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/tools/sandbox"
)

func TestProbeSandboxNamesABadValueAndLogsWhatIsInForce(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if _, err := probeSandbox(env(nil), "sometimes", t.TempDir(), zerolog.Nop()); err == nil ||
		!strings.Contains(err.Error(), "IAC_CODE_SANDBOX") {
		t.Errorf("--sandbox sometimes: %v", err)
	}
	if _, err := probeSandbox(env(map[string]string{"IAC_CODE_SANDBOX_NETWORK": "maybe"}), "", t.TempDir(), zerolog.Nop()); err == nil {
		t.Error("IAC_CODE_SANDBOX_NETWORK=maybe accepted")
	}
	var logs bytes.Buffer
	st, err := probeSandbox(env(map[string]string{"IAC_CODE_SANDBOX": "on"}), "off", t.TempDir(), zerolog.New(&logs))
	if err != nil || st.Settings.Mode != sandbox.Off || st.Active() {
		t.Errorf("the flag does not win: %+v %v", st, err)
	}
	if !strings.Contains(logs.String(), "sandbox off") {
		t.Errorf("log: %s", logs.String())
	}
}
