// Package mcptest is a small MCP server for the tests of the MCP client:
// it echoes its environment and the HTTP headers it got, runs slow calls
// with progress, changes its tool list, crashes, hangs at startup and
// returns every kind of content block. It is built on the server side of
// the official MCP Go SDK; cmd mcptestserver runs it over stdio, Streamable
// HTTP or SSE.
package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TinyPNG is the 1×1 PNG the `rich` tool returns.
var TinyPNG = []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 0x0d, 'I', 'H', 'D', 'R',
	0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0x1f, 0x15, 0xc4, 0x89}

func yes() *bool { return new(true) }

// readOnly marks a tool read-only (and not destructive).
var readOnly = &sdk.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: new(false)}

func object(props string, required ...string) json.RawMessage {
	req, _ := json.Marshal(required)
	if len(required) == 0 {
		req = []byte("[]")
	}
	return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(req) + `}`)
}

func text(s string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
}

func args(req *sdk.CallToolRequest) map[string]any {
	var m map[string]any
	_ = json.Unmarshal(req.Params.Arguments, &m)
	return m
}

// lastHeaders are the headers of the latest HTTP request (the SSE
// transport does not hand them to tools).
var lastHeaders atomic.Pointer[http.Header]

// RecordHeaders keeps each request's headers for the headers tool.
func RecordHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			h := r.Header.Clone()
			lastHeaders.Store(&h)
		}
		next.ServeHTTP(w, r)
	})
}

// New builds the server; name is announced as its implementation name.
func New(name string) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: name, Version: "1.0.0"}, nil)
	s.AddTool(&sdk.Tool{Name: "echo_env", Description: "Return environment variables, the working directory and the process group",
		InputSchema: object(`"names":{"type":"array","items":{"type":"string"},"description":"variables to show"}`, "names"),
		Annotations: readOnly},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var lines []string
			names, _ := args(req)["names"].([]any)
			for _, n := range names {
				name := fmt.Sprint(n)
				v, ok := os.LookupEnv(name)
				if !ok {
					v = "<unset>"
				}
				lines = append(lines, name+"="+v)
			}
			wd, _ := os.Getwd()
			lines = append(lines, "cwd="+wd, fmt.Sprintf("pgid=%d", syscall.Getpgrp()))
			return text(strings.Join(lines, "\n")), nil
		})
	s.AddTool(&sdk.Tool{Name: "headers", Description: "Return the HTTP request headers of this call",
		InputSchema: object(``), Annotations: readOnly},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			h := lastHeaders.Load()
			if req.Extra != nil && req.Extra.Header != nil {
				h = &req.Extra.Header
			}
			if h == nil {
				return text("no HTTP headers"), nil
			}
			var lines []string
			for k, v := range *h {
				lines = append(lines, k+": "+strings.Join(v, ", "))
			}
			sort.Strings(lines)
			return text(strings.Join(lines, "\n")), nil
		})
	s.AddTool(&sdk.Tool{Name: "slow", Description: "Sleep for seconds, reporting progress every step",
		InputSchema: object(`"seconds":{"type":"number"},"steps":{"type":"integer"}`, "seconds"), Annotations: readOnly},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			a := args(req)
			seconds, _ := a["seconds"].(float64)
			steps := 4
			if n, ok := a["steps"].(float64); ok && n > 0 {
				steps = int(n)
			}
			token := req.Params.GetProgressToken()
			for i := 1; i <= steps; i++ {
				select {
				case <-ctx.Done():
					log.Printf("slow call cancelled after step %d", i-1)
					return nil, ctx.Err()
				case <-time.After(time.Duration(seconds * float64(time.Second) / float64(steps))):
				}
				if token != nil {
					_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token,
						Progress: float64(i), Total: float64(steps), Message: fmt.Sprintf("step %d", i)})
				}
			}
			return text(fmt.Sprintf("slept %gs in %d steps", seconds, steps)), nil
		})
	s.AddTool(&sdk.Tool{Name: "rich", Description: "Return one block of every content type",
		InputSchema: object(``), Annotations: readOnly},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			size := int64(12)
			return &sdk.CallToolResult{Content: []sdk.Content{
				&sdk.TextContent{Text: "rich text"},
				&sdk.ImageContent{Data: TinyPNG, MIMEType: "image/png"},
				&sdk.AudioContent{Data: []byte("RIFFfakeWAVE"), MIMEType: "audio/wav"},
				&sdk.ResourceLink{URI: "file:///srv/notes.txt", Name: "notes.txt", MIMEType: "text/plain", Size: &size},
				&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "mem://readme", MIMEType: "text/markdown", Text: "# embedded"}},
				&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "mem://blob", MIMEType: "application/octet-stream", Blob: []byte{1, 2, 3}}},
			}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "fail", Description: "Return an error result",
		InputSchema: object(``), Annotations: readOnly},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "the widget is broken"}}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "write_note", Description: "Write a note file into the working directory",
		InputSchema: object(`"text":{"type":"string"}`, "text"),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: yes()}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			t, _ := args(req)["text"].(string)
			if err := os.WriteFile("note.txt", []byte(t), 0o644); err != nil {
				return nil, err
			}
			return text("wrote note.txt"), nil
		})
	// read_path reads any file: what a compromised server would try.
	s.AddTool(&sdk.Tool{Name: "read_path", Description: "Return the content of the file at path",
		InputSchema: object(`"path":{"type":"string"}`, "path"), Annotations: readOnly},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			p, _ := args(req)["path"].(string)
			data, err := os.ReadFile(p)
			if err != nil {
				return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: err.Error()}}}, nil
			}
			return text(string(data)), nil
		})
	// A tool that claims read-only but destructive: not trusted as read-only.
	s.AddTool(&sdk.Tool{Name: "contradictory", Description: "Read-only hint and destructive hint at once",
		InputSchema: object(``), Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: yes()}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return text("done"), nil })
	s.AddTool(&sdk.Tool{Name: "add_tool", Description: "Add a tool named name (it answers 'hello from <name>')",
		InputSchema: object(`"name":{"type":"string"}`, "name")},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			name, _ := args(req)["name"].(string)
			s.AddTool(&sdk.Tool{Name: name, Description: "added at run time", InputSchema: object(``), Annotations: readOnly},
				func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
					return text("hello from " + name), nil
				})
			return text("added " + name), nil
		})
	s.AddTool(&sdk.Tool{Name: "add_prompt", Description: "Add a prompt named name (its text: 'the <name> prompt')",
		InputSchema: object(`"name":{"type":"string"}`, "name")},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			name, _ := args(req)["name"].(string)
			s.AddPrompt(&sdk.Prompt{Name: name, Description: "added at run time"},
				func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
					return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: "the " + name + " prompt"}}}}, nil
				})
			return text("added prompt " + name), nil
		})
	s.AddTool(&sdk.Tool{Name: "remove_tool", Description: "Remove the tool named name",
		InputSchema: object(`"name":{"type":"string"}`, "name")},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			name, _ := args(req)["name"].(string)
			s.RemoveTools(name)
			return text("removed " + name), nil
		})
	s.AddTool(&sdk.Tool{Name: "crash", Description: "Exit the server process at once (status 3)",
		InputSchema: object(``)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			log.Printf("crashing on request")
			os.Exit(3)
			return nil, nil
		})
	addPrompts(s)
	return s
}

// addPrompts gives the server prompts: review (one argument), greet (two),
// plain (none, two messages), slow (answers after seconds) and broken
// (prompts/get fails).
func addPrompts(s *sdk.Server) {
	userText := func(texts ...string) *sdk.GetPromptResult {
		r := &sdk.GetPromptResult{}
		for _, t := range texts {
			r.Messages = append(r.Messages, &sdk.PromptMessage{Role: "user", Content: &sdk.TextContent{Text: t}})
		}
		return r
	}
	s.AddPrompt(&sdk.Prompt{Name: "review", Description: "Review the code with a focus",
		Arguments: []*sdk.PromptArgument{{Name: "focus", Description: "what to look at", Required: true}}},
		func(_ context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			return userText("Review the code, focusing on: " + req.Params.Arguments["focus"]), nil
		})
	s.AddPrompt(&sdk.Prompt{Name: "greet", Description: "Greet someone",
		Arguments: []*sdk.PromptArgument{{Name: "name", Required: true}, {Name: "tone"}}},
		func(_ context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			a := req.Params.Arguments
			return userText(fmt.Sprintf("Greet %s in a %s tone.", a["name"], a["tone"])), nil
		})
	s.AddPrompt(&sdk.Prompt{Name: "plain", Description: "A prompt without arguments"},
		func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			return userText("First part of the plain prompt.", "Second part of the plain prompt."), nil
		})
	s.AddPrompt(&sdk.Prompt{Name: "slow", Description: "A prompt that takes seconds to get",
		Arguments: []*sdk.PromptArgument{{Name: "seconds", Required: true}}},
		func(ctx context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			d, err := time.ParseDuration(req.Params.Arguments["seconds"] + "s")
			if err != nil {
				return nil, err
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(d):
			}
			return userText("slow prompt after " + d.String()), nil
		})
	s.AddPrompt(&sdk.Prompt{Name: "broken", Description: "A prompt whose prompts/get fails"},
		func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			return nil, fmt.Errorf("the prompt store is unavailable")
		})
}
