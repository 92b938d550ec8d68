package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	. "github.com/onsi/gomega"
)

// acpSchema validates wire messages against the official ACP v1 JSON Schema
// (the copy shipped in @agentclientprotocol/sdk), per method by $defs name:
// validating against the root proves nothing (its anyOf accepts anything).
type acpSchema struct {
	compiler *jsonschema.Compiler
	mu       sync.Mutex
	cache    map[string]*jsonschema.Schema
	// defs maps a method to its Request/Response/Notification $defs names.
	defs map[string]map[string]string
}

func loadSchema(path string) *acpSchema {
	raw, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	Expect(err).NotTo(HaveOccurred())
	c := jsonschema.NewCompiler()
	Expect(c.AddResource("acp.json", doc)).To(Succeed())
	var top struct {
		Defs map[string]map[string]any `json:"$defs"`
	}
	Expect(json.Unmarshal(raw, &top)).To(Succeed())
	s := &acpSchema{compiler: c, cache: map[string]*jsonschema.Schema{}, defs: map[string]map[string]string{}}
	for name, def := range top.Defs {
		method, _ := def["x-method"].(string)
		if method == "" {
			continue
		}
		for _, suffix := range []string{"Request", "Response", "Notification"} {
			if strings.HasSuffix(name, suffix) {
				if s.defs[method] == nil {
					s.defs[method] = map[string]string{}
				}
				s.defs[method][suffix] = name
			}
		}
	}
	return s
}

func (s *acpSchema) schema(def string) (*jsonschema.Schema, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.cache[def]; ok {
		return sch, nil
	}
	sch, err := s.compiler.Compile("acp.json#/$defs/" + def)
	if err != nil {
		return nil, err
	}
	s.cache[def] = sch
	return sch, nil
}

// canonical maps iac-code's input aliases to their ACP methods.
func canonical(method string) string {
	switch method {
	case "sessions/list":
		return "session/list"
	case "config/set":
		return "session/set_config_option"
	}
	return method
}

// wireChecker validates one connection's traffic: it learns the methods of
// the client's requests so it can validate the server's responses.
type wireChecker struct {
	schema *acpSchema
	mu     sync.Mutex
	asked  map[string]string // client request id (raw JSON) -> method
	alias  map[string]string // method -> the method whose schema checks it
	Errors []string
	Passed int
}

func newWireChecker(s *acpSchema) *wireChecker {
	return &wireChecker{schema: s, asked: map[string]string{}}
}

// ClientSent records a message the client wrote.
func (w *wireChecker) ClientSent(line []byte) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(line, &m) == nil && m.Method != "" && m.ID != nil {
		w.mu.Lock()
		method := canonical(m.Method)
		if as, ok := w.alias[method]; ok {
			method = as
		}
		w.asked[string(m.ID)] = method
		w.mu.Unlock()
	}
}

// ServerSent validates a message the server wrote.
func (w *wireChecker) ServerSent(line []byte) {
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Params  json.RawMessage `json:"params"`
		Result  json.RawMessage `json:"result"`
		Error   json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(line, &m); err != nil {
		w.fail("not JSON: %s", line)
		return
	}
	if m.JSONRPC != "2.0" {
		w.fail("jsonrpc is not 2.0: %s", line)
		return
	}
	var def string
	var value json.RawMessage
	switch {
	case m.Method != "" && m.ID != nil:
		def, value = w.schema.defs[m.Method]["Request"], m.Params
	case m.Method != "":
		def, value = w.schema.defs[m.Method]["Notification"], m.Params
	case m.Error != nil:
		def, value = "Error", m.Error
	default:
		w.mu.Lock()
		method := w.asked[string(m.ID)]
		w.mu.Unlock()
		def, value = w.schema.defs[method]["Response"], m.Result
	}
	if def == "" {
		w.fail("no schema for message: %s", line)
		return
	}
	sch, err := w.schema.schema(def)
	if err != nil {
		w.fail("compile %s: %v", def, err)
		return
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(orEmpty(value)))
	if err != nil {
		w.fail("decode %s: %v", def, err)
		return
	}
	if err := sch.Validate(inst); err != nil {
		w.fail("%s violation: %v\n  line: %s", def, err, line)
		return
	}
	w.mu.Lock()
	w.Passed++
	w.mu.Unlock()
}

func orEmpty(v json.RawMessage) []byte {
	if len(v) == 0 {
		return []byte("{}")
	}
	return v
}

func (w *wireChecker) fail(format string, args ...any) {
	w.mu.Lock()
	w.Errors = append(w.Errors, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// checkAs validates responses to method as responses to as: for unstable
// methods absent from the v1 schema whose response has a stable shape
// (session/fork answers like session/new).
func (w *wireChecker) checkAs(method, as string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.alias == nil {
		w.alias = map[string]string{}
	}
	w.alias[method] = as
}

// Violations returns what failed so far.
func (w *wireChecker) Violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.Errors...)
}
