package main

import (
	"debug/elf"
	"regexp"
	"slices"
	"testing"
)

// sdkService matches a method of one of the model SDKs' API services.
var sdkService = regexp.MustCompile(`^github\.com/(openai/openai-go/v3|anthropics/anthropic-sdk-go/v2)\.\(\*([A-Za-z]+Service)\)\.`)

// The server links only the SDK services it calls. An SDK's Client holds
// every service of its API as fields; holding one (rather than the one
// service) links all their methods, as fae8f9e did for OpenAI: the binary
// grew by 23 MB and the idle server's RssFile by ~4 MiB (issue 30's idle
// goal). A change that needs another service adds it here, with its cost.
func TestServerLinksOnlyTheSDKServicesItCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the server")
	}
	f, err := elf.Open(buildServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var linked []string
	for _, s := range syms {
		if m := sdkService.FindStringSubmatch(s.Name); m != nil && !slices.Contains(linked, m[2]) {
			linked = append(linked, m[2])
		}
	}
	slices.Sort(linked)
	want := []string{"ChatCompletionMessageService", "ChatCompletionService", "MessageBatchService", "MessageService"}
	if !slices.Equal(linked, want) {
		t.Fatalf("SDK services linked: %d %v, want %v", len(linked), linked, want)
	}
}
