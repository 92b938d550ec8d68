package llm_test

import (
	"reflect"
	"testing"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
)

// pngData is a 1×1 PNG, base64.
const pngData = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

func imageRequest() *llm.Request {
	return &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{
		{Type: llm.BlockText, Text: "what is"},
		{Type: llm.BlockText, Text: "in this picture?"},
		{Type: llm.BlockImage, MediaType: "image/png", Data: pngData},
		{Type: llm.BlockText, Text: "be brief"},
	}}}}
}

func TestOpenAISendsImagesAsDataURLParts(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "a dot"})
	if _, err := stream(t, newProvider(t, srv.URL()), imageRequest()); err != nil {
		t.Fatal(err)
	}
	req := srv.Requests()[0]
	user := req.Chat.Messages[len(req.Chat.Messages)-1]
	parts := user.Parts()
	want := []string{"text", "image_url", "text"}
	var got []string
	for _, p := range parts {
		got = append(got, p.Type)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parts %v, want %v (content %s)", got, want, user.Content)
	}
	if parts[0].Text != "what is\nin this picture?" || parts[2].Text != "be brief" {
		t.Errorf("text parts %q %q", parts[0].Text, parts[2].Text)
	}
	if u := parts[1].ImageURL.URL; u != "data:image/png;base64,"+pngData {
		t.Errorf("image url %q", u)
	}
	if imgs := req.Images(); len(imgs) != 1 || imgs[0].MediaType != "image/png" || imgs[0].Data != pngData || imgs[0].Role != "user" {
		t.Errorf("Images() = %+v", imgs)
	}
}

func TestOpenAIKeepsPlainStringContentWithoutImages(t *testing.T) {
	srv := llmtest.Start(t)
	if _, err := stream(t, newProvider(t, srv.URL()), userRequest("plain")); err != nil {
		t.Fatal(err)
	}
	if c := string(srv.Requests()[0].Chat.Messages[0].Content); c != `"plain"` {
		t.Errorf("content %s, want a plain string", c)
	}
}

func TestAnthropicSendsImageBlocks(t *testing.T) {
	srv := llmtest.Start(t)
	srv.Script(llmtest.Reply{Text: "a dot"})
	if _, err := stream(t, newAnthropic(t, srv.URL()), imageRequest()); err != nil {
		t.Fatal(err)
	}
	req := srv.Requests()[0]
	blocks := req.Anthropic.Messages[0].Blocks()
	var types []string
	for _, b := range blocks {
		types = append(types, b.Type)
	}
	if want := []string{"text", "text", "image", "text"}; !reflect.DeepEqual(types, want) {
		t.Fatalf("blocks %v, want %v", types, want)
	}
	src := blocks[2].Source
	if src == nil || src.Type != "base64" || src.MediaType != "image/png" || src.Data != pngData {
		t.Errorf("image source %+v", src)
	}
	if imgs := req.Images(); len(imgs) != 1 || imgs[0].Data != pngData {
		t.Errorf("Images() = %+v", imgs)
	}
}

func TestImagesAsTextForTextOnlyModels(t *testing.T) {
	msgs := imageRequest().Messages
	out := llm.ImagesAsText(msgs)
	if out[0].Content[2].Type != llm.BlockText || out[0].Content[2].Text != "[image: image/png]" {
		t.Errorf("image became %+v", out[0].Content[2])
	}
	if msgs[0].Content[2].Type != llm.BlockImage {
		t.Error("the history itself was changed")
	}
	plain := userRequest("x").Messages
	if got := llm.ImagesAsText(plain); &got[0] != &plain[0] {
		t.Error("messages without images are copied")
	}

	cases := []struct {
		setting, model string
		want           bool
	}{
		{"", "gpt-5", true},
		{"", "claude-sonnet-5-5", true},
		{"", "some-new-model", true},
		{"", "deepseek-chat", false},
		{"", "qwen3-coder-plus", false},
		{"", "qwen3-vl-plus", true},
		{"", "glm-4.6", false},
		{"", "glm-4.5v", true},
		{"auto", "kimi-k2-0905-preview", false},
		{"on", "deepseek-chat", true},
		{"off", "gpt-5", false},
	}
	for _, c := range cases {
		if got := (llm.Config{ImageInput: c.setting}).AcceptsImages(c.model); got != c.want {
			t.Errorf("ImageInput %q, model %q: %v, want %v", c.setting, c.model, got, c.want)
		}
	}
}

func TestImageInputSetting(t *testing.T) {
	cfg, err := llm.LoadConfig("", func(k string) string { return map[string]string{"IAC_CODE_IMAGE_INPUT": "OFF"}[k] })
	if err != nil || cfg.ImageInput != "off" {
		t.Fatalf("%v %q", err, cfg.ImageInput)
	}
	if _, err := llm.LoadConfig("", func(k string) string { return map[string]string{"IAC_CODE_IMAGE_INPUT": "maybe"}[k] }); err == nil {
		t.Fatal("a bad IAC_CODE_IMAGE_INPUT was accepted")
	}
}
