package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
)

// requestError turns a failed request into *APIError where there was an
// HTTP answer. resp is set by the SDK even when it reports an error.
func (p *openAIProvider) requestError(err error, resp *http.Response) error {
	var sdkErr *openai.Error
	status := 0
	var header http.Header
	msg := ""
	if errors.As(err, &sdkErr) {
		status, msg = sdkErr.StatusCode, sdkErr.Message
		if sdkErr.Response != nil {
			header = sdkErr.Response.Header
		}
	}
	if resp != nil && resp.StatusCode >= 400 {
		status, header = resp.StatusCode, resp.Header
		if msg == "" && resp.Body != nil {
			// The SDK re-populates the body after reading it.
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
			msg = errorMessage(body)
		}
	}
	if status == 0 {
		return p.redact(fmt.Errorf("openai_compatible: %w", err))
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &APIError{Status: status, Message: p.redactString(msg), RetryAfter: retryAfter(header)}
}

// errorMessage digs a message out of a non-OpenAI-shaped error body.
func errorMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &v) == nil {
		var s string
		var o struct {
			Message string `json:"message"`
		}
		switch {
		case json.Unmarshal(v.Error, &o) == nil && o.Message != "":
			return o.Message
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case v.Message != "":
			return v.Message
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 300 {
		cut := 300
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// retryAfter reads retry-after-ms (OpenAI) or Retry-After (seconds or date).
func retryAfter(h http.Header) time.Duration {
	if h == nil {
		return 0
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s > 0 {
			return time.Duration(s * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

func (p *openAIProvider) redactString(s string) string {
	if p.cfg.APIKey == "" {
		return s
	}
	return strings.ReplaceAll(s, p.cfg.APIKey, "[redacted]")
}

// redact keeps the API key out of error text (e.g. a key pasted into a URL).
func (p *openAIProvider) redact(err error) error { return redactErr(err, p.cfg.APIKey) }

// redactErr hides key in err's text; errors.Is/As still see the cause.
func redactErr(err error, key string) error {
	if err == nil || key == "" || !strings.Contains(err.Error(), key) {
		return err
	}
	return &redactedError{msg: strings.ReplaceAll(err.Error(), key, "[redacted]"), err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
