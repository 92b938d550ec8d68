package actors

import (
	"github.com/onsi/gomega/gcustom"
	"github.com/onsi/gomega/types"

	"github.com/iac-code/iac-code/llm"
)

// MatchFields2 matches a tool_result block by text and error flag.
func MatchFields2(text string, isError bool) types.GomegaMatcher {
	return gcustom.MakeMatcher(func(b llm.Block) (bool, error) {
		return b.Type == llm.BlockToolResult && b.Text == text && b.IsError == isError, nil
	}).WithTemplate("Expected tool result {{.Actual}} to have text " + text)
}
