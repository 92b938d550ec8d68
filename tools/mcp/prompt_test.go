package mcp_test

import (
	"context"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools/mcp"
)

var _ = Describe("MCP prompts", func() {
	It("lists the server's prompts with their arguments and gets one with arguments filled in", func() {
		st := startServer(mcp.Config{Transport: mcp.Stdio, Command: serverBin})
		ev := st.connected()
		byName := map[string]*sdk.Prompt{}
		for _, p := range ev.Prompts {
			byName[p.Name] = p
		}
		Expect(byName).To(HaveKey("review"))
		Expect(byName["review"].Arguments).To(HaveLen(1))
		Expect(byName["review"].Arguments[0].Name).To(Equal("focus"))
		Expect(byName).To(HaveKey("greet"))

		res, err := st.srv.GetPrompt(context.Background(), "review", map[string]string{"focus": "error handling"})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Messages).To(HaveLen(1))
		Expect(res.Messages[0].Content.(*sdk.TextContent).Text).To(Equal("Review the code, focusing on: error handling"))

		_, err = st.srv.GetPrompt(context.Background(), "broken", nil)
		Expect(err).To(MatchError(ContainSubstring("the prompt store is unavailable")))
		_, err = st.srv.GetPrompt(context.Background(), "no_such_prompt", nil)
		Expect(err).To(HaveOccurred())
	})

	It("lists the prompts again after prompts/list_changed", func() {
		st := startServer(mcp.Config{Transport: mcp.Stdio, Command: serverBin})
		st.connected()
		Expect(callText(st, "add_prompt", `{"name":"late"}`).Output).To(Equal("added prompt late"))
		Eventually(func() []string {
			var names []string
			for _, p := range st.ev.last().Prompts {
				names = append(names, p.Name)
			}
			return names
		}, 10*time.Second, 10*time.Millisecond).Should(ContainElements("late", "review"))
		res, err := st.srv.GetPrompt(context.Background(), "late", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Messages[0].Content.(*sdk.TextContent).Text).To(Equal("the late prompt"))
	})

	It("refuses prompts/get once the server is closed", func() {
		st := startServer(mcp.Config{Transport: mcp.Stdio, Command: serverBin})
		st.connected()
		st.srv.Close()
		_, err := st.srv.GetPrompt(context.Background(), "review", nil)
		Expect(err).To(MatchError(mcp.ErrNotConnected))
	})
})
