package mcp_test

import (
	"encoding/json"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/tools/mcp"
)

var _ = Describe("public tool names", func() {
	It("are mcp__<server>__<tool> with runs of other characters replaced by _", func() {
		Expect(mcp.PublicNames([]mcp.Ref{{"everything", "get-sum"}, {"my server!", "read.file/v2"}, {"db", "query"}})).
			To(Equal([]string{"mcp__everything__get_sum", "mcp__my_server___read_file_v2", "mcp__db__query"}))
	})

	It("cut long names to 64 characters with a hash, so different long names stay apart", func() {
		long := strings.Repeat("x", 80)
		names := mcp.PublicNames([]mcp.Ref{{"srv", long + "a"}, {"srv", long + "b"}})
		for _, n := range names {
			Expect(len(n)).To(Equal(64))
			Expect(n).To(MatchRegexp(`^mcp__srv__x+_[0-9a-f]{8}$`))
		}
		Expect(names[0]).NotTo(Equal(names[1]))
		Expect(mcp.PublicNames([]mcp.Ref{{"srv", long + "a"}})[0]).To(Equal(names[0]), "stable")
	})

	It("suffix every name of a collision", func() {
		names := mcp.PublicNames([]mcp.Ref{{"a-b", "c"}, {"a_b", "c"}, {"other", "c"}})
		Expect(names[0]).To(MatchRegexp(`^mcp__a_b__c_[0-9a-f]{8}$`))
		Expect(names[1]).To(MatchRegexp(`^mcp__a_b__c_[0-9a-f]{8}$`))
		Expect(names[0]).NotTo(Equal(names[1]))
		Expect(names[2]).To(Equal("mcp__other__c"))
	})
})

var _ = Describe("MCP tools as tools.Tool", func() {
	var srv *mcp.Server
	BeforeEach(func() {
		// never connected: the adapter only needs its name here
		srv = mcp.Start(mcp.Config{Name: "srv", Transport: mcp.HTTP, URL: "http://127.0.0.1:1/"}, mcp.Options{})
		DeferCleanup(srv.Close)
	})

	It("take the server's description and schema; a missing schema is the empty object schema", func() {
		t := mcp.NewTool("mcp__srv__x", srv, &sdk.Tool{Name: "x", Description: "does x",
			InputSchema: map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "number"}}}}, 0)
		Expect(t.Description()).To(Equal("does x"))
		Expect(t.Schema()).To(MatchJSON(`{"type":"object","properties":{"n":{"type":"number"}}}`))
		Expect(mcp.NewTool("y", srv, &sdk.Tool{Name: "y"}, 0).Schema()).To(MatchJSON(`{"type":"object","properties":{}}`))
		Expect(mcp.NewTool("z", srv, &sdk.Tool{Name: "z", InputSchema: map[string]any{"properties": map[string]any{}}}, 0).Schema()).
			To(MatchJSON(`{"type":"object","properties":{}}`))
	})

	It("are read-only only when readOnlyHint is set and destructiveHint is not true", func() {
		f, tr := false, true
		Expect(mcp.ReadOnly(nil)).To(BeFalse())
		Expect(mcp.ReadOnly(&sdk.ToolAnnotations{})).To(BeFalse())
		Expect(mcp.ReadOnly(&sdk.ToolAnnotations{ReadOnlyHint: true})).To(BeTrue())
		Expect(mcp.ReadOnly(&sdk.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &f})).To(BeTrue())
		Expect(mcp.ReadOnly(&sdk.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &tr})).To(BeFalse())
	})

	It("decode arguments strictly once and title the call <server>: <tool>", func() {
		t := mcp.NewTool("mcp__srv__x", srv, &sdk.Tool{Name: "x\u202e"}, 0)
		c, err := t.Prepare(&tools.Env{}, json.RawMessage(`{"a":{"b":1,"b":2}}`))
		Expect(c).To(BeNil())
		Expect(err).To(MatchError(ContainSubstring("Invalid input for tool 'mcp__srv__x': duplicate field")))
		_, err = t.Prepare(&tools.Env{}, json.RawMessage(`[1]`))
		Expect(err).To(HaveOccurred())
		c, err = t.Prepare(&tools.Env{}, json.RawMessage(`{"big":12345678901234567890}`))
		Expect(err).NotTo(HaveOccurred())
		Expect(c.Title()).To(Equal(`srv: x\u202e`))
		Expect(c.Access().Local()).To(BeTrue())
	})
})

var _ = Describe("MCP results", func() {
	It("map every block one to one and give the model text with markers", func() {
		size := int64(5)
		res := mcp.ToResult(&sdk.CallToolResult{Content: []sdk.Content{
			&sdk.TextContent{Text: "hello"},
			&sdk.ImageContent{Data: []byte{1, 2, 3}, MIMEType: "image/png"},
			&sdk.AudioContent{Data: []byte{4}, MIMEType: "audio/wav"},
			&sdk.ResourceLink{URI: "file:///a.txt", Name: "a.txt", Size: &size},
			&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "mem://t", Text: "body"}},
			&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "mem://b", MIMEType: "application/zip", Blob: []byte{9, 9}}},
		}})
		Expect(res.IsError).To(BeFalse())
		Expect(res.Output).To(Equal("hello\n[image: image/png, 3 bytes]\n[audio: audio/wav, 1 bytes]\n" +
			"[resource_link: a.txt <file:///a.txt>]\n<resource uri=\"mem://t\">\nbody\n</resource>\n" +
			"[resource: mem://b (application/zip, binary, 2 bytes)]"))
		Expect(res.Content).To(Equal([]tools.ContentBlock{
			{Type: "text", Text: "hello"},
			{Type: "image", Data: "AQID", MimeType: "image/png"},
			{Type: "audio", Data: "BA==", MimeType: "audio/wav"},
			{Type: "resource_link", URI: "file:///a.txt", Name: "a.txt", Size: &size},
			{Type: "resource", Resource: &tools.ResourceContents{URI: "mem://t", Text: "body"}},
			{Type: "resource", Resource: &tools.ResourceContents{URI: "mem://b", MimeType: "application/zip", Blob: "CQk=", IsBlob: true}},
		}))
	})

	It("make isError a failed call and show structured content when there is no text", func() {
		res := mcp.ToResult(&sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "boom"}}})
		Expect(res.IsError).To(BeTrue())
		Expect(res.Output).To(Equal("boom"))
		res = mcp.ToResult(&sdk.CallToolResult{StructuredContent: map[string]any{"n": 1}})
		Expect(res.Output).To(Equal(`{"n":1}`))
	})

	It("show an image too large for a client line as a marker", func() {
		res := mcp.ToResult(&sdk.CallToolResult{Content: []sdk.Content{&sdk.ImageContent{Data: make([]byte, mcp.MaxBinaryBlock), MIMEType: "image/png"}}})
		Expect(res.Content).To(HaveLen(1))
		Expect(res.Content[0].Type).To(Equal("text"))
		Expect(res.Content[0].Text).To(ContainSubstring("too large to show"))
	})
})
