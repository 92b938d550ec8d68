package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// NameAskUser is the ask_user tool's name.
const NameAskUser = "ask_user"

// Question limits: one question, a short list of choices.
const (
	maxQuestionRunes = 2000
	maxAskOptions    = 20
	maxOptionRunes   = 200
)

// AskUser asks the user a question through the client (ACP
// elicitation/create, form mode): a choice among options, or a short
// text. The actor layer offers it only to sessions whose client
// advertises form elicitation. It touches nothing: read-only.
type AskUser struct{}

func (AskUser) Name() string { return NameAskUser }
func (AskUser) Description() string {
	return "Ask the user a question when you need a decision or information only they have, instead of guessing. " +
		"Give options for a choice (the user picks one), or none for a short text answer. The user may decline."
}
func (AskUser) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"question":{"type":"string","description":"The question, self-contained"},` +
		`"options":{"type":"array","items":{"type":"string"},"maxItems":` + fmt.Sprint(maxAskOptions) +
		`,"description":"Choices to pick from; omit for a free text answer"}},` +
		`"required":["question"],"additionalProperties":false}`)
}
func (AskUser) Kind() Kind     { return KindOther }
func (AskUser) ReadOnly() bool { return true }

// Question is what ask_user asks: Options empty for a text answer.
type Question struct {
	Message string
	Options []string
}

// Answer is the user's reply: Action "accept" (with Text), "decline" or
// "cancel".
type Answer struct {
	Action string
	Text   string
}

// Asker is a Client that can put a question to the user.
type Asker interface {
	Ask(ctx context.Context, q Question) (Answer, error)
}

type askInput struct {
	Question *string  `json:"question"`
	Options  []string `json:"options"`
}

type askCall struct{ q Question }

func (AskUser) Prepare(_ *Env, input json.RawMessage) (Call, error) {
	var in askInput
	if err := decodeInput(NameAskUser, input, &in); err != nil {
		return nil, err
	}
	if in.Question == nil || strings.TrimSpace(*in.Question) == "" {
		return nil, inputError(NameAskUser, "missing required field 'question'")
	}
	if n := utf8.RuneCountInString(*in.Question); n > maxQuestionRunes {
		return nil, inputError(NameAskUser, fmt.Sprintf("'question' is %d characters; keep it under %d", n, maxQuestionRunes))
	}
	if len(in.Options) > maxAskOptions {
		return nil, inputError(NameAskUser, fmt.Sprintf("at most %d options, got %d", maxAskOptions, len(in.Options)))
	}
	seen := map[string]bool{}
	for i, o := range in.Options {
		o = strings.TrimSpace(o)
		if o == "" || utf8.RuneCountInString(o) > maxOptionRunes || seen[o] {
			return nil, inputError(NameAskUser, fmt.Sprintf("options[%d] must be a distinct non-empty string under %d characters", i, maxOptionRunes))
		}
		seen[o] = true
		in.Options[i] = o
	}
	if len(in.Options) == 0 {
		// "options": [] means a free text answer, as no options does: the
		// client asks for text and the answer is not held to a list.
		in.Options = nil
	}
	return &askCall{q: Question{Message: strings.TrimSpace(*in.Question), Options: in.Options}}, nil
}

func (c *askCall) Title() string         { return "Ask: " + printable(oneLine(c.q.Message), titleMaxRunes) }
func (c *askCall) Locations() []Location { return nil }
func (c *askCall) Access() Access        { return Access{} }

func (c *askCall) Run(context.Context, func(string)) Result {
	return Errorf("ask_user needs a client that shows questions (ACP elicitation); ask in your answer instead")
}

// RunVia asks through the client.
func (c *askCall) RunVia(ctx context.Context, cl Client, _ func(string)) Result {
	a, ok := cl.(Asker)
	if cl == nil || !ok || !cl.Caps().Elicitation {
		return c.Run(ctx, nil)
	}
	ans, err := a.Ask(ctx, c.q)
	if err != nil {
		if ctx.Err() != nil {
			return Errorf("ask_user cancelled")
		}
		return Errorf("The question could not be shown: " + err.Error())
	}
	switch ans.Action {
	case "accept":
		if c.q.Options != nil && !oneOf(ans.Text, c.q.Options) {
			return Errorf(fmt.Sprintf("The client answered %q, which is not one of the options", ans.Text))
		}
		return Result{Output: "The user answered: " + ans.Text}
	case "decline":
		return Result{Output: "The user declined to answer."}
	}
	return Result{Output: "The user cancelled the question."}
}
