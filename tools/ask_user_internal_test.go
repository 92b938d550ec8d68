package tools

import (
	"encoding/json"
	"testing"
)

// An empty options list is a free text question, as none is: otherwise
// every typed answer would be refused as "not one of the options".
func TestAskUserEmptyOptionsIsAFreeTextQuestion(t *testing.T) {
	for _, in := range []string{`{"question":"Which?","options":[]}`, `{"question":"Which?"}`} {
		call, err := AskUser{}.Prepare(&Env{}, json.RawMessage(in))
		if err != nil {
			t.Fatal(err)
		}
		if opts := call.(*askCall).q.Options; opts != nil {
			t.Errorf("%s: options %v, want none (free text)", in, opts)
		}
	}
	call, err := AskUser{}.Prepare(&Env{}, json.RawMessage(`{"question":"Which?","options":["a","b"]}`))
	if err != nil || len(call.(*askCall).q.Options) != 2 {
		t.Fatalf("a choice keeps its options: %v %v", call, err)
	}
}
