package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// goSDKUnstableSchema is the unstable ACP schema of the Go SDK in go.mod
// (0.13.0): session/set_model was removed from the spec and from the TS
// SDK's schemas in June 2026, and is still there.
func goSDKUnstableSchema() *acpSchema {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/coder/acp-go-sdk").Output()
	Expect(err).NotTo(HaveOccurred())
	return loadSchema(filepath.Join(strings.TrimSpace(string(out)), "schema", "schema.unstable.json"))
}

// validDef validates raw against the $defs entry def of s.
func validDef(s *acpSchema, def string, raw []byte) error {
	sch, err := s.schema(def)
	Expect(err).NotTo(HaveOccurred())
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	Expect(err).NotTo(HaveOccurred())
	return sch.Validate(inst)
}

var _ = Describe("the unstable session/set_model over stdio", Label("e2e", "models"), func() {
	var fake *llmtest.Server
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
	})

	It("switches the model as the model config option does, valid against the unstable schema", func() {
		a := startAgent(agentEnv(fake, "IAC_CODE_PROVIDER=openai", "IAC_CODE_MODEL=gpt-4.1"))
		a.initialize()
		res := a.result(a.request("session/new", map[string]any{"cwd": GinkgoT().TempDir(), "mcpServers": []any{}}))
		sid := res["sessionId"].(string)
		models := res["models"].(map[string]any)
		Expect(models["currentModelId"]).To(Equal("gpt-4.1"))
		var other string
		for _, m := range models["availableModels"].([]any) {
			if id := m.(map[string]any)["modelId"].(string); id != "gpt-4.1" && other == "" {
				other = id
			}
		}
		Expect(other).NotTo(BeEmpty(), "the preset offers more than one model")

		params := map[string]any{"sessionId": sid, "modelId": other}
		unstable := goSDKUnstableSchema()
		raw, _ := json.Marshal(params)
		Expect(validDef(unstable, "SetSessionModelRequest", raw)).To(Succeed())
		// The v1 checker has no session/set_model: it checks the answer as
		// set_mode's ({}); the unstable schema checks it as itself below.
		from := a.mark()
		id := a.requestChecked("session/set_model", "session/set_mode", params)
		Expect(a.result(id)).To(BeEmpty())
		var frame struct {
			Result json.RawMessage `json:"result"`
		}
		Expect(json.Unmarshal(a.rawResponse(id), &frame)).To(Succeed())
		Expect(validDef(unstable, "SetSessionModelResponse", frame.Result)).To(Succeed())

		By("clients are told through config_option_update, before the answer")
		updates := a.sessionUpdates(sid, from, id)
		Expect(updates).To(ContainElement(And(HaveKeyWithValue("sessionUpdate", "config_option_update"),
			WithTransform(func(u map[string]any) any {
				for _, o := range u["configOptions"].([]any) {
					if o.(map[string]any)["id"] == "model" {
						return o.(map[string]any)["currentValue"]
					}
				}
				return nil
			}, Equal(other)))))

		Expect(a.result(a.prompt(sid, "hi"))["stopReason"]).To(Equal("end_turn"))
		Expect(lastRequest(fake).Model()).To(Equal(other))

		By("an unknown model is refused with -32602 and changes nothing")
		e := a.errorOf(a.requestChecked("session/set_model", "session/set_mode", map[string]any{"sessionId": sid, "modelId": "no-such-model"}))
		Expect(e["code"]).To(Equal(-32602.0))
		Expect(a.result(a.prompt(sid, "again"))["stopReason"]).To(Equal("end_turn"))
		Expect(lastRequest(fake).Model()).To(Equal(other))
		a.finish()
	})
})
